"""`seqexport verify` against a hostile bucket: bounded memory and time, clear answers, inert keys.

Each case runs the real CLI in a subprocess of its own (`support.measured_cli`) against a local
hostile S3 server (`support.hostile_bucket`) or a planted local folder, and asserts its exit code,
its report and its peak RSS (issue 24: at most 200 MB; on main a gzip bomb took it to 2.15 GB and a
1,000,000-key listing had not finished after 240 s).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from seqexport_dagster.management.verify import verify_location
from seqexport_dagster_tests.support import hostile_bucket
from seqexport_dagster_tests.support.measured_cli import Measured, run_measured

#: Issue 24's bound on verify's peak memory, whatever the bucket holds.
MAX_RSS_MB = 200
READ_KEY = ("--access-key-id", "reader", "--secret-env", "READ_SECRET")
ENV = {"READ_SECRET": "read-secret-value"}


def verify_hostile(mode: str, *extra: str, timeout: float = 180) -> Measured:
    with hostile_bucket.running(mode) as bucket:
        argv = ["verify", bucket.source, "--endpoint", bucket.endpoint, *READ_KEY, "--json", *extra]
        return run_measured(argv, env=ENV, timeout=timeout)


def problems(result: Measured) -> list[dict[str, object]]:
    report = json.loads(result.out)
    assert report["ok"] is False
    found: list[dict[str, object]] = report["problems"]
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        ("bomb", "has a line longer than 1 MiB (--max-line-bytes)"),  # 1 MB of gzip, 1 GiB of zeros
        ("longline", "has a line longer than 1 MiB (--max-line-bytes)"),  # one 1 GiB line
        ("huge", "1,073,741,824 bytes; the bound is 64 MiB (--max-object-bytes), not read"),
        ("liar", "the store sends more than 200 bytes; not read further"),  # listed small, sent 1 GiB
    ],
)
def test_an_oversized_part_is_one_problem_within_200_mb(mode: str, detail: str) -> None:
    result = verify_hostile(mode)
    assert result.code == 7, result
    (problem,) = problems(result)
    assert problem["kind"] == "too_large" and detail in str(problem["detail"])
    assert problem["key"] == hostile_bucket.part_key(0)
    assert result.peak_rss_mb <= MAX_RSS_MB, result
    assert result.seconds < 60, result
    print(f"verify {mode}: peak RSS {result.peak_rss_mb} MB, {result.seconds} s")  # noqa: T201 - the figure for the report


@pytest.mark.slow
def test_a_listing_that_never_ends_stops_at_the_cap_with_a_clear_error() -> None:
    result = verify_hostile("endless", "--max-objects", "30000", timeout=120)
    assert result.code == 2, result
    error = json.loads(result.out)["error"]
    assert error["field"] == "max_objects"
    assert "holds more than 30,000 objects; listing stopped there" in error["message"]
    assert "listed 25,000 objects so far" in result.err  # progress, even with --json and no terminal
    assert result.peak_rss_mb <= MAX_RSS_MB, result


@pytest.mark.slow
def test_a_million_keys_stop_at_the_default_cap_within_200_mb() -> None:
    """1,000,000 keys (1,000 pages): the default cap (200,000) answers within bounds, not a hang."""
    result = verify_hostile("million", timeout=300)
    assert result.code == 2, result
    assert "more than 200,000 objects" in json.loads(result.out)["error"]["message"]
    assert "listed 200,000 objects so far" in result.err
    assert result.peak_rss_mb <= MAX_RSS_MB, result
    print(f"verify 1,000,000 keys: peak RSS {result.peak_rss_mb} MB, {result.seconds} s")  # noqa: T201 - the figure for the report


@pytest.mark.slow
def test_a_listing_page_far_past_1000_keys_is_refused_before_it_is_parsed() -> None:
    result = verify_hostile("bigpage", timeout=120)
    assert result.code == 2, result
    error = json.loads(result.out)["error"]
    assert error["field"] == "max_objects" and "answered one listing page of more than" in error["message"]
    assert result.peak_rss_mb <= MAX_RSS_MB, result


@pytest.mark.slow
def test_a_listing_page_that_never_ends_is_cut_off_as_it_is_read() -> None:
    """One page declared as 1 GiB and streamed without end: botocore would read it whole."""
    result = verify_hostile("pagebomb", timeout=120)
    assert result.code == 2, result
    error = json.loads(result.out)["error"]
    assert error["field"] == "max_objects" and "answered one listing page of more than" in error["message"]
    assert "not read further" in error["message"]
    assert result.peak_rss_mb <= MAX_RSS_MB, result
    print(f"verify endless listing page: peak RSS {result.peak_rss_mb} MB, {result.seconds} s")  # noqa: T201 - the figure for the report


def test_a_local_1_gib_part_is_not_read(tmp_path: Path) -> None:
    path = _hour_part(tmp_path, b"")
    with path.open("r+b") as file:
        file.truncate(1024**3)  # sparse: 1 GiB listed, nothing on disk
    result = run_measured(["verify", str(tmp_path), "--json"])
    assert result.code == 7, result
    (problem,) = problems(result)
    assert problem["kind"] == "too_large" and "1,073,741,824 bytes; the bound is 64 MiB" in str(problem["detail"])
    assert result.peak_rss_mb <= MAX_RSS_MB, result


EVIL = "\x1b[2J\x1b[H\rALL WINDOWS OK\x1b[8m"


@pytest.mark.slow
def test_a_key_that_forges_a_verdict_prints_escaped_over_s3() -> None:
    with hostile_bucket.running("evil") as bucket:
        argv = ["verify", bucket.source, "--endpoint", bucket.endpoint, *READ_KEY]
        text = run_measured(argv, env=ENV)
        as_json = run_measured([*argv, "--json"], env=ENV)
    assert text.code == 7 and as_json.code == 7
    for output in (text.out, text.err, as_json.out):
        assert "\x1b" not in output and "\r" not in output
    assert "\\x1b[2J\\x1b[H\\x0dALL WINDOWS OK\\x1b[8m" in text.out
    (problem,) = problems(as_json)
    assert problem["key"] == hostile_bucket.EVIL_KEY  # JSON carries the key exactly, escaped by JSON


def test_a_local_key_with_escapes_and_a_newline_prints_on_one_inert_line(tmp_path: Path) -> None:
    folder = tmp_path / "bucket" / "email_events" / "date=2026-09-30"
    folder.mkdir(parents=True)
    (folder / f"{EVIL}\nOK: no problems found").write_bytes(b"x")
    result = run_measured(["verify", str(tmp_path / "bucket")])
    assert result.code == 7, result
    assert "\x1b" not in result.out and "\r" not in result.out
    assert "OK: no problems found" not in result.out.splitlines()
    assert [line for line in result.out.splitlines() if "unexpected_object" in line] == [
        "  [unexpected_object] email_events: email_events/date=2026-09-30/\\x1b[2J\\x1b[H\\x0dALL WINDOWS OK"
        "\\x1b[8m\\x0aOK: no problems found: not a name Sequenzy writes in a dataset folder"
    ]


def _hour_part(root: Path, body: bytes) -> Path:
    path = root / hostile_bucket.part_key(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def test_a_local_gzip_bomb_is_stopped_by_the_decompressed_bound(tmp_path: Path) -> None:
    """Lines short enough to pass, far too many bytes: --max-decompressed-bytes stops it."""
    line = b'{"id":"' + b"a" * 100_000 + b'"}\n'
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    _hour_part(tmp_path, b"".join(packer.compress(line) for _ in range(600)) + packer.flush())
    result = run_measured(["verify", str(tmp_path), "--json", "--max-decompressed-bytes", "50MB"])
    assert result.code == 7, result
    (problem,) = problems(result)
    assert problem["kind"] == "too_large"
    assert "decompresses to more than 50,000,000 bytes (--max-decompressed-bytes)" in str(problem["detail"])


def test_a_bomb_of_empty_lines_stops_after_the_part_limit(tmp_path: Path) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    _hour_part(tmp_path, b"".join(packer.compress(b"\n" * 1_000_000) for _ in range(200)) + packer.flush())
    report = verify_location(str(tmp_path))
    kinds = {p.kind for p in report.problems}
    assert kinds == {"too_many_lines", "schema_mismatch"}
    assert any("at least 50001 lines" in p.detail for p in report.problems)


def test_bounds_as_options_name_the_field(tmp_path: Path) -> None:
    from seqexport_dagster.errors import InvalidInput
    from seqexport_dagster.management.verify.bounds import parse_size

    for option, value, field in [
        ("--max-objects", "0", "max_objects"),
        ("--max-objects", "lots", "max_objects"),
        ("--max-object-bytes", "64 parsecs", "max_object_bytes"),
        ("--max-line-bytes", "-1", "max_line_bytes"),
    ]:
        result = run_measured(["verify", str(tmp_path), "--json", option, value])
        assert result.code == 2, (option, value, result)
        assert json.loads(result.out)["error"]["field"] == field
    assert parse_size("f", "64MiB") == 64 * 1024 * 1024 and parse_size("f", "1GB") == 10**9
    with pytest.raises(InvalidInput):
        parse_size("f", "12XB")


def test_streamed_lines_match_a_whole_gunzip() -> None:
    """The streaming reader reads what any gzip reader reads: members, a missing last newline,
    in any chunking; and refuses truncation and trailing junk."""
    from seqexport_dagster.errors import ObjectTooLarge
    from seqexport_dagster.management.verify.bounds import Limits, gzip_lines

    cases = [b"", gzip.compress(b""), gzip.compress(b"a\nb\n"), gzip.compress(b"a\nb"),
             gzip.compress(b"a\n") + gzip.compress(b"b\nc\n"), gzip.compress(b"\n\n\n"),
             gzip.compress(b"x" * 3_000_000 + b"\ny\n")]  # fmt: skip
    limits = Limits(max_line_bytes=4_000_000)
    for body in cases:
        expected = gzip.decompress(body).split(b"\n") if body else []
        if expected and expected[-1] == b"":
            expected.pop()
        for size in (1, 7, 65_536, len(body) or 1):
            chunks = [body[i : i + size] for i in range(0, len(body), size)]
            assert list(gzip_lines(chunks, limits)) == expected, (body[:12], size)
    for bad in (gzip.compress(b"abc\n")[:-3], b"not gzip", gzip.compress(b"a\n") + b"junk"):
        with pytest.raises((zlib.error, EOFError)):
            list(gzip_lines([bad], limits))
    with pytest.raises(ObjectTooLarge):
        list(gzip_lines([gzip.compress(b"x" * 5_000_000)], limits))


def test_the_cli_defaults_are_the_library_defaults() -> None:
    import argparse

    from seqexport_dagster.cli.parser import build_parser
    from seqexport_dagster.cli.tools import verify_limits
    from seqexport_dagster.management.verify.bounds import DEFAULT_LIMITS

    args = build_parser().parse_args(["verify", "somewhere"])
    assert isinstance(args, argparse.Namespace) and verify_limits(args) == DEFAULT_LIMITS


def test_the_hostile_bombs_are_one_gzip_member_of_what_they_claim() -> None:
    """The bombs are built from one deflated MiB repeated (`hostile_bucket._bomb`): any gzip reader
    must read them back as the bytes they stand for (here 3 MiB; the bucket serves 1 GiB)."""
    for head, fill in ((b"", b"\0"), (b'{"id":"', b"a")):
        body = hostile_bucket._bomb(head, fill, mebibytes=3)
        reader = zlib.decompressobj(31)
        assert reader.decompress(body) == head + fill * (3 * 1024 * 1024) and reader.eof and not reader.unused_data
