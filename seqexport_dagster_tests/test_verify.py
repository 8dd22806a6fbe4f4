"""`verify` passes a clean export written by the real runner and finds every planted defect."""

from __future__ import annotations

import gzip
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqexport_dagster.contract.keys import parse_key, part_key, success_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window, iso_ms
from seqexport_dagster.demo.generator import Scale
from seqexport_dagster.management.verify import verify_location
from seqexport_dagster.management.verify.bucket import LocalBucket
from seqexport_dagster.management.verify.checks import PartMemo, repeated_key, verify_bucket
from seqexport_dagster.store import ControlPlane
from seqexport_dagster_tests.support.demo_export import ACCOUNT, DAY, write_demo_export
from seqexport_dagster_tests.support.world import DAY0, World, sqlite_world


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, Path, str]]:
    """Written once per module (24 hourly runs × 4 datasets); each test works on a copy."""
    with sqlite_world(tmp_path_factory.mktemp("verify")) as world:
        root, export_id = write_demo_export(world)
        yield world, root, export_id


@pytest.fixture
def export(clean: tuple[World, Path, str], tmp_path: Path) -> tuple[Path, str]:
    _, root, export_id = clean
    copy = tmp_path / "bucket"
    shutil.copytree(root, copy)  # copy2 keeps mtimes: _SUCCESS stays the newest
    # These are the checks of the objects themselves, as on a bucket written before manifests; the
    # manifests' own checks (which would also flag each tampered part) are in test_manifest.py.
    shutil.rmtree(copy / "_sequenzy", ignore_errors=True)
    return copy, export_id


@pytest.fixture
def store(clean: tuple[World, Path, str]) -> ControlPlane:
    return clean[0].store


def kinds(report) -> set[str]:
    return {p.kind for p in report.problems}


def parts_of(root: Path, dataset: str) -> dict[Window, list[Path]]:
    found: dict[Window, list[Path]] = {}
    for path in sorted((root / dataset).rglob("*.jsonl.gz")):
        parsed = parse_key(path.relative_to(root).as_posix())
        assert parsed is not None and parsed.window is not None
        found.setdefault(parsed.window, []).append(path)
    return found


def read_lines(path: Path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).splitlines()


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"".join(line + b"\n" for line in lines)))


def multi_part_window(root: Path, dataset: str = "email_events", at_least: int = 3) -> list[Path]:
    return next(ps for ps in parts_of(root, dataset).values() if len(ps) >= at_least)


def test_clean_export_passes(export: tuple[Path, str], store: ControlPlane) -> None:
    root, export_id = export
    report = verify_location(str(root), ledger=(store, export_id))
    assert report.ok, report.render()
    assert report.ledger_checked
    assert set(report.datasets) == {"email_events", "sms_events", "custom_events", "subscribers"}
    email = report.datasets["email_events"]
    # The chain starts when the export was created (DAY0) and the hourly grid covers the day.
    assert email.windows == 24 and email.days == 1
    assert email.first == iso_ms(DAY0) and email.last == iso_ms(DAY0 + DAY_MS)
    assert email.parts > email.windows  # part_limit=50 splits busy windows
    assert report.datasets["subscribers"].rows == 300
    text = report.render()
    assert "OK: no problems found" in text
    as_json = json.loads(report.to_json())
    assert as_json["ok"] is True and as_json["problems"] == []
    assert as_json["datasets"]["email_events"]["rows"] == email.rows


def test_gap(export: tuple[Path, str]) -> None:
    root, _ = export
    windows = parts_of(root, "sms_events")
    middle = sorted(windows)[5]
    for path in windows[middle]:
        path.unlink()
    report = verify_location(str(root))
    assert kinds(report) == {"gap"}
    (gap,) = report.problems
    assert gap.dataset == "sms_events" and gap.key == f"({iso_ms(middle.from_ms)}, {iso_ms(middle.to_ms)}]"


def test_overlap(export: tuple[Path, str]) -> None:
    root, _ = export
    w = sorted(parts_of(root, "custom_events"))[3]
    shifted = Window(w.from_ms + 60_000, w.to_ms + 60_000)
    (root / part_key("", "custom_events", shifted, 0)).write_bytes(gzip.compress(b""))
    report = verify_location(str(root))
    assert kinds(report) == {"overlap"}
    assert all(p.dataset == "custom_events" for p in report.problems)


def test_missing_part(export: tuple[Path, str]) -> None:
    root, _ = export
    parts = multi_part_window(root)
    parts[1].unlink()
    report = verify_location(str(root))
    assert kinds(report) == {"missing_part"}
    assert "0001" in report.problems[0].detail


def test_missing_last_part_needs_the_ledger(export: tuple[Path, str], store: ControlPlane) -> None:
    """The bucket alone cannot tell a lost last part from a shorter window; the ledger can."""
    root, export_id = export
    parts = multi_part_window(root)
    parts[-1].unlink()
    assert verify_location(str(root)).ok
    report = verify_location(str(root), ledger=(store, export_id))
    assert kinds(report) == {"ledger_rows_mismatch"}


def test_corrupt_gzip(export: tuple[Path, str]) -> None:
    root, _ = export
    part = multi_part_window(root)[0]
    body = part.read_bytes()
    part.write_bytes(body[: len(body) // 2])
    report = verify_location(str(root))
    assert kinds(report) == {"corrupt_gzip"}
    assert report.problems[0].key == part.relative_to(root).as_posix()


def test_garbage_is_not_gzip(export: tuple[Path, str]) -> None:
    root, _ = export
    part = multi_part_window(root)[0]
    part.write_bytes(b"this is not gzip at all")
    assert kinds(verify_location(str(root))) == {"corrupt_gzip"}


def test_part_of_50001_lines(export: tuple[Path, str]) -> None:
    root, _ = export
    w, paths = sorted(parts_of(root, "email_events").items())[-1]
    template = json.loads(read_lines(paths[0])[0])
    # At the window's end and with ids after "eev_...": still ordered, unique, inside the window.
    template["recorded_at"] = iso_ms(w.to_ms)
    lines = []
    for n in range(50_001):
        template["id"] = f"planted_{n:06d}"
        lines.append(json.dumps(template).encode())
    write_lines(paths[-1], lines)
    report = verify_location(str(root))
    assert kinds(report) == {"too_many_lines"}
    assert "50001 lines" in report.problems[0].detail


def test_row_outside_its_window(export: tuple[Path, str]) -> None:
    root, _ = export
    parts = multi_part_window(root)
    last = parts[-1]
    lines = read_lines(last)
    row = json.loads(lines[-1])
    w = parse_key(last.relative_to(root).as_posix()).window
    row["recorded_at"] = iso_ms(w.to_ms + 1)  # still in order, one millisecond too late
    lines[-1] = json.dumps(row).encode()
    write_lines(last, lines)
    report = verify_location(str(root))
    assert kinds(report) == {"row_outside_window"}
    assert iso_ms(w.to_ms + 1) in report.problems[0].detail


def test_duplicate_id_across_parts(export: tuple[Path, str]) -> None:
    """A row of part 0001 also at the end of part 0000: order is intact, the id is there twice."""
    root, _ = export
    parts = multi_part_window(root)
    first_of_next = read_lines(parts[1])[0]
    lines = read_lines(parts[0])
    write_lines(parts[0], [*lines, first_of_next])
    report = verify_location(str(root))
    assert kinds(report) == {"duplicate_id"}
    (dup,) = report.problems
    assert dup.key == json.loads(first_of_next)["id"] and dup.count == 2
    rel = [p.relative_to(root).as_posix() for p in parts[:2]]
    assert dup.locations == (f"{rel[0]}:{len(lines) + 1}", f"{rel[1]}:1")
    assert "id appears 2 times" in report.render()


def test_a_memo_of_parts_read_changes_no_report(export: tuple[Path, str], store: ControlPlane) -> None:
    """`verify_bucket(memo=...)` (the simulator verifies every day): a part read before is not read
    again, yet each report is the one a fresh verify gives, problems of unchanged parts, duplicates
    across parts and the ledger's comparison included; a changed part is read anew."""
    root, export_id = export
    parts = multi_part_window(root)
    write_lines(parts[0], [*read_lines(parts[0]), read_lines(parts[1])[0]])  # an id twice
    part = multi_part_window(root, "sms_events", 1)[0]
    part.write_bytes(part.read_bytes()[:40])  # corrupt
    memo: PartMemo = {}

    def both(ledger: tuple[ControlPlane, str] | None) -> tuple[object, object]:
        fresh = verify_bucket(LocalBucket(root), ledger=ledger, workers=1)
        remembered = verify_bucket(LocalBucket(root), ledger=ledger, workers=1, memo=memo)
        return fresh, remembered

    for ledger in (None, (store, export_id), None):
        fresh, remembered = both(ledger)
        assert remembered == fresh
    assert kinds(fresh) >= {"duplicate_id", "corrupt_gzip"}
    read = len(memo)
    assert read == sum(summary.parts for summary in fresh.datasets.values())
    lines = read_lines(parts[1])
    write_lines(parts[1], lines[1:])  # the duplicate is gone, part 0001 reads anew
    fresh, remembered = both(None)
    assert remembered == fresh and "duplicate_id" not in kinds(fresh) and len(memo) == read + 1


def test_out_of_order_rows(export: tuple[Path, str]) -> None:
    root, _ = export
    part = multi_part_window(root)[0]
    lines = read_lines(part)
    lines[0], lines[1] = lines[1], lines[0]
    write_lines(part, lines)
    assert kinds(verify_location(str(root))) == {"out_of_order"}


def test_schema_mismatch(export: tuple[Path, str]) -> None:
    root, _ = export
    part = multi_part_window(root, "sms_events", at_least=1)[0]
    lines = read_lines(part)
    row = json.loads(lines[0])
    row["segments"] = "2"  # retyped
    lines[0] = json.dumps(row).encode()
    write_lines(part, lines)
    report = verify_location(str(root))
    assert kinds(report) == {"schema_mismatch"}
    assert "segments: expected integer" in report.problems[0].detail


def test_a_line_with_a_duplicate_key_is_a_schema_mismatch(export: tuple[Path, str]) -> None:
    """Issue 39: a pasted value ``{},"id":"evt_FORGED3"`` left a line naming ``id`` twice; a JSON parser
    keeps the last, so the row's id was replaced and `verify` said "OK". A nested value may repeat a
    key of the row (a property named ``id``): that line stays valid."""
    root, _ = export
    part = multi_part_window(root, "email_events", at_least=1)[0]
    lines = read_lines(part)
    lines[0] = lines[0][:-1] + b',"subject":"replaced","id":"evt_FORGED3"}'
    write_lines(part, lines)
    report = verify_location(str(root))
    assert kinds(report) == {"schema_mismatch"}, report.render()
    assert "line 1: duplicate key id, subject" in report.problems[0].detail, report.problems[0].detail
    assert repeated_key(b'{"id":"a","properties":{"id":"b","id":"c"}}', [("id", b'"id":')]) is None


def test_missing_success(export: tuple[Path, str]) -> None:
    root, _ = export
    (root / success_key("", DAY)).unlink()
    report = verify_location(str(root))
    assert kinds(report) == {"missing_success"}


def test_non_empty_success(export: tuple[Path, str]) -> None:
    root, _ = export
    (root / success_key("", DAY)).write_bytes(b"done\n")
    assert kinds(verify_location(str(root))) == {"success_not_empty"}


def test_success_written_before_a_part(export: tuple[Path, str]) -> None:
    root, _ = export
    success = root / success_key("", DAY)
    part = next((root / "subscribers").rglob("*.jsonl.gz"))
    later = success.stat().st_mtime_ns + 5_000_000_000
    os.utime(part, ns=(later, later))
    assert kinds(verify_location(str(root))) == {"success_not_last"}


def test_unexpected_object_in_a_dataset_folder(export: tuple[Path, str]) -> None:
    root, _ = export
    (root / "email_events" / f"date={DAY.isoformat()}" / "notes.txt").write_text("hi")
    assert kinds(verify_location(str(root))) == {"unexpected_object"}


def test_empty_location_fails(tmp_path: Path) -> None:
    report = verify_location(str(tmp_path))
    assert not report.ok and kinds(report) == {"no_data"}


def test_s3_prefix_on_moto(export: tuple[Path, str], moto) -> None:
    """The same checks over S3 with a read key: List + Get, LastModified for _SUCCESS."""
    root, _ = export
    s3 = moto.admin_client()
    bucket = f"verify-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    # Two datasets keep the test quick; the checks are the same code paths as for local folders.
    for name in ("email_events", "custom_events"):
        shutil.rmtree(root / name)
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".seqexport-tmp" not in p.parts)
    # _SUCCESS last, as the exporter writes it.
    files.sort(key=lambda p: p.name == "_SUCCESS")
    for path in files:
        s3.put_object(Bucket=bucket, Key=f"sequenzy/{path.relative_to(root).as_posix()}", Body=path.read_bytes())
    options = {"s3_endpoint": moto.endpoint, "access_key_id": "reader", "secret_access_key": "read-secret"}
    report = verify_location(f"s3://{bucket}/sequenzy", **options)
    assert report.ok, report.render()
    assert report.source == f"s3://{bucket}/sequenzy"
    local = verify_location(str(root))
    assert {n: s.rows for n, s in report.datasets.items()} == {n: s.rows for n, s in local.datasets.items()}

    s3.put_object(Bucket=bucket, Key=f"sequenzy/{success_key('', DAY)}", Body=b"x")
    part = next(p for p in files if "sms_events" in p.parts)
    s3.put_object(Bucket=bucket, Key=f"sequenzy/{part.relative_to(root).as_posix()}", Body=b"not gzip")
    broken = verify_location(f"s3://{bucket}/sequenzy", **options)
    assert kinds(broken) == {"success_not_empty", "corrupt_gzip"}
    assert "secret" not in broken.to_json() and "read-secret" not in broken.render()


def test_s3_storage_failures_leave_verify_as_our_errors(moto) -> None:
    """A bucket that cannot be listed is one `ExportError` naming the store's answer; a part that
    cannot be read is one problem of the report, named the same way (never a botocore type)."""
    from seqexport_dagster.errors import ExportError
    from seqexport_dagster.management.verify import S3Bucket

    options = {"s3_endpoint": moto.endpoint, "access_key_id": "reader", "secret_access_key": "read-secret"}
    with pytest.raises(ExportError) as listed:
        verify_location("s3://no-such-bucket-here/sequenzy", **options)
    assert type(listed.value) is ExportError
    assert str(listed.value).startswith("cannot list s3://no-such-bucket-here/sequenzy: NoSuchBucket")

    s3 = moto.admin_client()
    bucket = f"verify-gone-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    reader = S3Bucket(bucket, "", scheme="s3", endpoint=moto.endpoint, access_key_id="reader",
                      secret_access_key="read-secret", region=None)  # fmt: skip
    try:
        with pytest.raises(ExportError) as read:
            reader.read("sms_events/date=2026-09-30/gone.jsonl.gz")
    finally:
        reader.close()
    assert type(read.value) is ExportError and str(read.value) == "NoSuchKey: The specified key does not exist."


def test_cli_verify_exit_codes_and_json(export: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    from seqexport_dagster.cli import EXIT_VERIFY_FAILED, main

    root, _ = export
    assert main(["verify", str(root)], env={}) == 0
    assert "OK: no problems found" in capsys.readouterr().out
    (root / success_key("", DAY)).unlink()
    assert main(["verify", str(root), "--json"], env={}) == EXIT_VERIFY_FAILED
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [p["kind"] for p in report["problems"]] == ["missing_success"]


def test_cli_verify_s3_reads_the_secret_from_the_environment(
    export: tuple[Path, str], moto, capsys: pytest.CaptureFixture[str]
) -> None:
    from seqexport_dagster.cli import main

    root, _ = export
    s3 = moto.admin_client()
    bucket = f"verify-cli-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    for path in sorted((root / "sms_events").rglob("*.jsonl.gz")):
        s3.put_object(Bucket=bucket, Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    argv = ["verify", f"s3://{bucket}", "--endpoint", moto.endpoint, "--access-key-id", "reader"]
    assert main([*argv, "--secret-env", "READ_SECRET"], env={"READ_SECRET": "s3cr3t-value"}) == 0
    out = capsys.readouterr().out
    assert "sms_events" in out and "s3cr3t-value" not in out
    # A key id without its secret is refused up front (exit 2), not sent half-configured.
    assert main(argv, env={}) == 2


def test_late_rows_appended_as_new_parts_pass_and_a_duplicate_among_them_does_not(tmp_path: Path) -> None:
    """Write-once delivery appends late rows as more parts of their window, ordered inside the file
    but before rows of earlier parts: verify (and its ledger check) accepts that, and still finds a
    row delivered twice."""
    from seqexport_dagster.delivery.reconcile import reconcile
    from seqexport_dagster.demo.generator import insert_rows

    with sqlite_world(tmp_path) as world:
        root, export_id = write_demo_export(world, scale=Scale(20, 10, 2, 5))
        late_at = iso_ms(DAY0 + 20 * HOUR_MS + 1)
        insert_rows(
            world.source_engine,
            "custom_events",
            [(ACCOUNT, "cev_zz_late", "trial_started", late_at, late_at, "sub_acme_0000001", None, "{}")],
        )
        (result,) = [r for r in reconcile(world.runner(part_limit=50), export_id) if r.changed]
        assert result.late_rows == 1 and result.report is not None and result.report.sent.parts == 1
        window = result.window
        parts = parts_of(root, "custom_events")[window]
        assert parts[-1].name.endswith(f"-{len(parts) - 1:04d}.jsonl.gz") and len(parts) >= 2
        report = verify_location(str(root), ledger=(world.store, export_id))
        assert report.ok and report.ledger_checked, report.render()
        # The same row appended again (what write-once delivery must never do) is a duplicate.
        shutil.copy(
            parts[-1], parts[-1].with_name(parts[-1].name.replace(f"{len(parts) - 1:04d}", f"{len(parts):04d}"))
        )
        assert "duplicate_id" in kinds(verify_location(str(root)))


def test_every_problem_kind_verify_reports_is_in_the_docs_table() -> None:
    """Issue 47: ``corrupt_parquet`` was reported but missing from docs/customers.md's table. Every
    kind the verify package can report (a ``Problem``, ``problem(...)`` or ``ParquetProblem`` with a
    literal kind) is named in the "Verify a bucket" section."""
    import re

    root = Path(__file__).parents[1]
    source = "\n".join(p.read_text() for p in (root / "seqexport_dagster/management/verify").glob("*.py"))
    kinds = set(re.findall(r'(?:Problem|problem|bad)\(\s*"([a-z_]+)"', source))
    kinds |= set(re.findall(r'\("(too_many_lines|too_large|corrupt_parquet|schema_mismatch)",', source))
    assert {"corrupt_parquet", "bad_manifest", "missing_window", "too_many_lines"} <= kinds, kinds
    text = (root / "docs" / "customers.md").read_text()
    section = text[text.index("## Verify a bucket") : text.index("## Webhooks")]
    assert sorted(k for k in kinds if f"`{k}`" not in section) == []
