"""Window manifests: written create-only after each window's parts, read back by `verify`.

A real day runs through the runner into a local folder and into moto (an ordinary and a create-only
store behind the fault proxy). Each manifest's counts are compared with the objects themselves,
late rows give a new manifest under a new name, and `verify` without the ledger finds a missing
first window and a missing last window from the bucket alone.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.keys import MANIFEST_FOLDER, manifest_key, parse_manifest_key, part_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window, day_of, iso_ms
from seqexport_dagster.delivery.manifest import FORMAT, manifest_body, manifest_parts
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.management.verify import LocalBucket, verify_bucket, verify_location
from seqexport_dagster.store import LATE_PART, PART_LANDED, PartRecord
from seqexport_dagster_tests.support.faults.proxy import FaultProxy, lost_reply
from seqexport_dagster_tests.support.format_change import write_change_export
from seqexport_dagster_tests.support.moto_server import MotoServer
from seqexport_dagster_tests.support.scripted_store import ScriptedStore
from seqexport_dagster_tests.support.sim.bucket import CREATE_ONLY_403, NO_PRECONDITION, ORDINARY, SimCrash
from seqexport_dagster_tests.support.world import DAY0, World

LAG = 120_000
SCALE = Scale(subscribers=20, email_sends_per_hour=10, sms_sends_per_hour=3, custom_per_hour=3)
EVENTS = ("email_events", "sms_events")


def test_manifest_name_and_body_are_pure_functions() -> None:
    window = Window(DAY0, DAY0 + HOUR_MS)
    key = manifest_key("sequenzy", "email_events", window, 3)
    assert key == (
        f"sequenzy/_sequenzy/manifests/email_events/date=2026-09-30/email_events-{DAY0}-{DAY0 + HOUR_MS}-through-0003.json"
    )
    assert parse_manifest_key(key.removeprefix("sequenzy/")) == ("email_events", window, 3)
    assert parse_manifest_key("_sequenzy/manifests/email_events/date=2026-09-30/x.json") is None
    ledger = [
        PartRecord(1, "k1", "range", PART_LANDED, None, 2, 20, "rL0Y20zC+Fzt72VPzMSk2A==", None),
        PartRecord(0, "k0", "range", PART_LANDED, None, 3, 30, None, None),
        PartRecord(2, "k2", "range", "intent", None, 1, 10, None, None),
    ]
    parts = manifest_parts(ledger)
    assert [p.part for p in parts] == [0, 1] and parts[1].md5 == hashlib.md5(b"foo").hexdigest()
    body = manifest_body("email_events", window, DAY0, parts)
    assert body == manifest_body("email_events", window, DAY0, parts), "a re-send is byte-identical"
    doc = json.loads(body)
    assert doc["format"] == FORMAT and (doc["rows"], doc["bytes"]) == (5, 50)
    assert doc["window"] == {
        "from_ms": DAY0,
        "to_ms": DAY0 + HOUR_MS,
        "from": iso_ms(DAY0),
        "to": iso_ms(DAY0 + HOUR_MS),
    }


def manifests_in(root: Path) -> dict[str, dict[str, Any]]:
    folder = root / MANIFEST_FOLDER
    return {p.relative_to(root).as_posix(): json.loads(p.read_bytes()) for p in sorted(folder.rglob("*.json"))}


def run_day(world: World, export_id: str, hours: int = 24) -> None:
    runner = world.runner(part_limit=10)
    for hour in range(1, hours + 1):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        for dataset in EVENTS:
            runner.run_day(export_id, dataset, day_of(DAY0))


@pytest.fixture
def day_export(world: World) -> Iterator[tuple[World, Path, str]]:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
    export = world.local_export(datasets=EVENTS, prefix="sequenzy")
    run_day(world, export.id)
    yield world, world.root / "bucket" / "sequenzy", export.id


def test_each_manifest_matches_the_bucket(day_export: tuple[World, Path, str]) -> None:
    world, root, export_id = day_export
    manifests = manifests_in(root)
    assert len(manifests) == 48  # one per window: 24 hours of two datasets
    for key, doc in manifests.items():
        dataset, window, through = parse_manifest_key(key) or ("", None, -1)
        assert doc["dataset"] == dataset and doc["chain_from_ms"] == DAY0
        assert [p["part"] for p in doc["parts"]] == list(range(through + 1))
        on_disk = sorted((root / dataset / f"date={doc['date']}").glob(f"{dataset}-{doc['window']['from_ms']}-*"))
        assert [p["key"] for p in doc["parts"]] == [f"sequenzy/{p.relative_to(root).as_posix()}" for p in on_disk]
        for entry, path in zip(doc["parts"], on_disk, strict=True):
            body = path.read_bytes()
            assert entry["bytes"] == len(body)
            assert entry["md5"] == hashlib.md5(body).hexdigest()
            assert entry["rows"] == len(gzip.decompress(body).splitlines())
        assert doc["rows"] == sum(p["rows"] for p in doc["parts"])
        committed = [w for w in world.store.ledger(export_id, dataset=dataset) if w.window == window]
        assert committed and committed[-1].rows == doc["rows"] and committed[-1].parts == len(doc["parts"])
    report = verify_location(str(root), until_ms=DAY0 + DAY_MS)
    assert report.ok, report.render()
    assert report.manifests == 48
    # Nothing but parts in the dataset folders: the manifests live under _sequenzy/ only.
    assert not [p for d in EVENTS for p in (root / d).rglob("*") if p.is_file() and not p.name.endswith(".jsonl.gz")]


def kinds(report: Any) -> set[str]:
    return {p.kind for p in report.problems}


def window_files(root: Path, dataset: str, window: Window) -> list[Path]:
    return sorted((root / dataset / f"date={window.date_key}").glob(f"{dataset}-{window.from_ms}-{window.to_ms}-*"))


def test_verify_without_the_ledger_finds_a_missing_first_and_last_window(
    day_export: tuple[World, Path, str], tmp_path: Path
) -> None:
    _, root, _ = day_export
    first = Window(DAY0, DAY0 + HOUR_MS)
    last = Window(DAY0 + 23 * HOUR_MS, DAY0 + DAY_MS)

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(root, target)
        return target

    # The first window gone altogether, parts and manifest: the next manifest says where the chain starts.
    gone = copy("first")
    for p in window_files(gone, "email_events", first):
        p.unlink()
    for p in (gone / MANIFEST_FOLDER / "email_events").rglob(f"email_events-{first.from_ms}-*"):
        p.unlink()
    report = verify_bucket(LocalBucket(gone), workers=1)
    missing = [p for p in report.problems if p.kind == "missing_window"]
    assert [(p.dataset, p.key) for p in missing] == [("email_events", f"({iso_ms(DAY0)}, {iso_ms(first.to_ms)}]")]
    assert "the first window(s) are missing" in missing[0].detail
    # Without manifests (as before them), that bucket looked complete: this is what they add.
    shutil.rmtree(gone / "_sequenzy")
    assert verify_bucket(LocalBucket(gone), workers=1).ok

    # The last window's parts gone, its manifest left: the manifest names what is missing.
    parts_gone = copy("last-parts")
    files = window_files(parts_gone, "sms_events", last)
    for p in files:
        p.unlink()
    report = verify_bucket(LocalBucket(parts_gone), workers=1)
    assert kinds(report) == {"missing_part"} and len(report.problems) == len(files)
    # Only its last part gone: invisible to the part numbering, visible to the manifest.
    tail = copy("last-part")
    window_files(tail, "sms_events", last)[-1].unlink()
    assert kinds(verify_bucket(LocalBucket(tail), workers=1)) == {"missing_part"}

    # The last window gone altogether: --until says how far the chain must reach.
    everything = copy("last")
    for p in window_files(everything, "email_events", last):
        p.unlink()
    for p in (everything / MANIFEST_FOLDER / "email_events").rglob(f"email_events-{last.from_ms}-*"):
        p.unlink()
    assert verify_bucket(LocalBucket(everything), workers=1).ok  # nothing says the day should be over
    report = verify_bucket(LocalBucket(everything), workers=1, until_ms=DAY0 + DAY_MS)
    assert [(p.kind, p.dataset) for p in report.problems] == [("missing_window", "email_events")]
    assert "the last window(s) are missing" in report.problems[0].detail

    # A part without a manifest, and a manifest that lies about a part, are both named.
    unlisted = copy("unlisted")
    extra = part_key("", "email_events", first, 99)
    (unlisted / extra).write_bytes(gzip.compress(b""))
    kinds_found = kinds(verify_bucket(LocalBucket(unlisted), workers=1))
    assert "unlisted_part" in kinds_found
    lying = copy("lying")
    target = next(iter(sorted((lying / MANIFEST_FOLDER / "sms_events").rglob("*.json"))))
    doc = json.loads(target.read_bytes())
    doc["parts"][0]["rows"] += 1
    target.write_text(json.dumps(doc))
    assert kinds(verify_bucket(LocalBucket(lying), workers=1)) == {"manifest_mismatch"}


def test_late_rows_get_a_new_manifest_under_a_new_name(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), prefix="")
    run_day(world, export.id, hours=2)
    root = world.root / "bucket"
    before = manifests_in(root)
    window = Window(DAY0, DAY0 + HOUR_MS)
    with world.source_engine.connect() as conn:
        row = list(
            conn.execute(sa.text("SELECT * FROM email_events WHERE recorded_at <= :t ORDER BY id LIMIT 1"),
                         {"t": iso_ms(window.to_ms)}).one()
        )  # fmt: skip
    row[1] = "eev_late_" + secrets.token_hex(4)
    insert_rows(world.source_engine, "email_events", [tuple(row)])
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + LAG
    report = world.runner(part_limit=10).run_day(export.id, "email_events", day_of(DAY0), rewrite=True)
    assert any(w.window == window and w.sent.late_rows == 1 for w in report.windows)
    after = manifests_in(root)
    assert set(before) < set(after), "earlier manifests stay as they were"
    assert all(after[k] == v for k, v in before.items())
    (new_key,) = {k for k in set(after) - set(before) if f"-{window.from_ms}-" in k}
    old_key = next(k for k in before if f"-{window.from_ms}-" in k)
    assert parse_manifest_key(new_key)[2] == parse_manifest_key(old_key)[2] + 1  # type: ignore[index]
    assert after[new_key]["rows"] == before[old_key]["rows"] + 1
    ledger = world.store.window_parts(export.id, "email_events", window, export.location)
    assert ledger[-1].kind == LATE_PART
    assert verify_location(str(root)).ok


@pytest.fixture(params=[False, True], ids=["ordinary", "create-only"])
def proxy(request: pytest.FixtureRequest, moto: MotoServer) -> Iterator[FaultProxy]:
    p = FaultProxy(moto.port, write_once=request.param)
    try:
        yield p
    finally:
        p.close()


def test_manifests_on_s3_are_create_only_and_verify_reads_them(
    world: World, moto: MotoServer, proxy: FaultProxy
) -> None:
    """A lost answer on a manifest makes the runner send it again: the re-send meets the create-only
    precondition (412), nothing is overwritten, and `verify` over S3 reads every manifest."""
    s3 = moto.admin_client()
    bucket = f"manifests-{secrets.token_hex(5)}"
    s3.create_bucket(Bucket=bucket)
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 4 * HOUR_MS, scale=SCALE)
    config = DestinationConfig(
        "gcs" if proxy.write_once else "s3", bucket, prefix="sequenzy", region="auto" if proxy.write_once else "us-east-1",
        endpoint=proxy.endpoint, access_key_id="AKIAMANIFEST00000001", secret_access_key="manifest-secret-0001",
    )  # fmt: skip
    export = world.store.create_export(
        account_id="acme", destination=config, datasets=("email_events",), frequency="1h", lag_ms=LAG, now_ms=DAY0
    )
    proxy.add(lost_reply(match=f"email_events-{DAY0 + HOUR_MS}-{DAY0 + 2 * HOUR_MS}-through-"))
    runner = world.runner(part_limit=10)
    for hour in range(1, 5):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        try:
            runner.run_day(export.id, "email_events", day_of(DAY0))
        except Exception:
            runner.run_day(export.id, "email_events", day_of(DAY0))
    manifest_puts = proxy.puts(f"/{bucket}/sequenzy/_sequenzy/manifests/")
    assert len({r.path for r in manifest_puts}) == 4 and len(manifest_puts) >= 5
    assert proxy.overwrites == [] and proxy.precondition_hits
    report = verify_location(
        f"s3://{bucket}/sequenzy", s3_endpoint=moto.endpoint, access_key_id="testing", secret_access_key="testing",
        region="us-east-1", until_ms=DAY0 + 4 * HOUR_MS,
    )  # fmt: skip
    assert report.ok, report.render()
    assert report.manifests == 4


def test_the_customer_docs_loader_loads_every_row_once_by_manifest(world: World, moto: MotoServer) -> None:
    """The loader of docs/customers.md ("Load by manifest"), run as written against a moto bucket
    with a late part: it loads each part once, checks bytes, MD5 and rows, and sees every row."""
    import re as regex

    text = (Path(__file__).parents[1] / "docs" / "customers.md").read_text()
    section = text[text.index("### Load by manifest") :]
    code = regex.search(r"```python\n(.*?)```", section, regex.S)
    assert code is not None
    definitions = code.group(1).split("\npages = ")[0].replace('BUCKET, PREFIX = "acme-exports", "sequenzy"', "")
    s3 = moto.admin_client()
    bucket = f"loader-{secrets.token_hex(5)}"
    s3.create_bucket(Bucket=bucket)
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, scale=SCALE)
    config = DestinationConfig(
        "s3", bucket, prefix="sequenzy", region="us-east-1", endpoint=moto.endpoint,
        access_key_id="AKIALOADER0000000001", secret_access_key="loader-secret-0001",
    )  # fmt: skip
    export = world.store.create_export(
        account_id="acme", destination=config, datasets=("email_events",), frequency="1h", lag_ms=LAG, now_ms=DAY0
    )
    run_day(world, export.id, hours=3)
    with world.source_engine.connect() as conn:
        row = list(conn.execute(sa.text("SELECT * FROM email_events ORDER BY recorded_at LIMIT 1")).one())
    row[1] = "eev_late_" + secrets.token_hex(4)
    insert_rows(world.source_engine, "email_events", [tuple(row)])
    world.runner(part_limit=10).run_day(export.id, "email_events", day_of(DAY0), rewrite=True)

    namespace: dict[str, Any] = {}
    exec(definitions, namespace)  # the docs' imports and load_manifest, as written
    namespace.update(s3=s3, BUCKET=bucket, PREFIX="sequenzy")
    loaded: list[str] = []
    done: set[str] = set()
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="sequenzy/_sequenzy/manifests/")["Contents"]
    keys = sorted(o["Key"] for o in listing)
    assert len(keys) == 4  # three windows, and one more for the window with the late part
    for key in keys:
        namespace["load_manifest"](key, done, lambda _ds, rows: loaded.extend(r["id"] for r in rows))
    with world.source_engine.connect() as conn:
        until = {"t": iso_ms(DAY0 + 3 * HOUR_MS)}
        source = set(conn.execute(sa.text("SELECT id FROM email_events WHERE recorded_at <= :t"), until).scalars())
    assert sorted(loaded) == sorted(source), "every row once"


@pytest.mark.parametrize("kind", [NO_PRECONDITION, CREATE_ONLY_403])
def test_a_manifest_re_sent_after_a_backfill_moved_the_chain_start_is_the_same_bytes(world: World, kind: str) -> None:
    """Sim seed 10000617. An export delivers a day at one place and moves. At the new place, a
    window's manifest lands and the worker is killed before the commit. Before the retry, a
    backfill delivers the earlier day at the new place: the chain there now starts a day earlier.
    The retry re-sends the manifest under its name with the start it was first sent with, so it is
    the same bytes: a store without preconditions would otherwise have replaced it, and a
    create-only one been sent a different body under a landed name. The backfill's manifests carry
    the new start, so `verify` still sees where the chain begins."""
    day0 = day_of(DAY0)
    generate_account(world.source_engine, "acme", DAY0 - DAY_MS, DAY0 + 2 * HOUR_MS, scale=SCALE)
    world.clock.now_ms = DAY0 - DAY_MS
    export = world.local_export(datasets=("email_events",), prefix="old")
    old, new = ScriptedStore(ORDINARY), ScriptedStore(kind)
    stores = {"old": old, "new": new}
    runner = world.runner(part_limit=1000, destination_factory=lambda config, policy: stores[config.prefix])
    world.clock.now_ms = DAY0 + LAG
    assert runner.run_day(export.id, "email_events", day0 - dt.timedelta(days=1)).complete
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="new")
    export = world.store.update_destination(export.id, moved, world.clock())

    window = Window(DAY0, DAY0 + HOUR_MS)
    key = manifest_key("new", "email_events", window, 0)
    new.faults[key.rsplit("/", 1)[-1]] = "crash"
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    with pytest.raises(SimCrash):
        runner.run_day(export.id, "email_events", day0)
    first = new.bucket.objects[key]
    assert json.loads(first)["chain_from_ms"] == DAY0

    world.clock.now_ms += 10 * 60_000
    backfilled = runner.run_day(export.id, "email_events", day0 - dt.timedelta(days=1), rewrite=True)
    assert len(backfilled.windows) == 1 and backfilled.windows[0].window.from_ms == DAY0 - DAY_MS
    world.clock.now_ms += HOUR_MS
    assert any(w.window == window for w in runner.run_day(export.id, "email_events", day0).windows)
    assert new.bucket.violations == [], "nothing replaced, no other bytes under a landed name"
    assert new.bucket.objects[key] == first
    starts = {json.loads(b)["chain_from_ms"] for k, b in new.bucket.objects.items() if f"/{MANIFEST_FOLDER}/" in k}
    assert min(starts) == DAY0 - DAY_MS, "the backfilled day's manifest carries where the chain starts now"


def test_the_customer_docs_loader_reads_both_formats_on_a_format_change(world: World, moto: MotoServer) -> None:
    """The same loader over an export that changed from JSONL to Parquet: its first version gunzipped
    every part and failed on the first Parquet one (BadGzipFile)."""
    import re as regex

    text = (Path(__file__).parents[1] / "docs" / "customers.md").read_text()
    section = text[text.index("### Load by manifest") :]
    code = regex.search(r"```python\n(.*?)```", section, regex.S)
    assert code is not None
    definitions = code.group(1).split("\npages = ")[0].replace('BUCKET, PREFIX = "acme-exports", "sequenzy"', "")
    export = write_change_export(world, datasets=("email_events", "custom_events"))
    s3 = moto.admin_client()
    bucket = f"loader-{secrets.token_hex(5)}"
    s3.create_bucket(Bucket=bucket)
    for path in export.root.rglob("*"):  # the export's prefix is empty: manifests name keys from the root
        if path.is_file():
            s3.put_object(Bucket=bucket, Key=path.relative_to(export.root).as_posix(), Body=path.read_bytes())
    namespace: dict[str, Any] = {}
    exec(definitions, namespace)  # the docs' imports, part_rows and load_manifest, as written
    namespace.update(s3=s3, BUCKET=bucket, PREFIX="")
    loaded: dict[str, list[str]] = {"email_events": [], "custom_events": []}
    done: set[str] = set()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="_sequenzy/manifests/")
    for key in sorted(o["Key"] for page in pages for o in page.get("Contents", [])):
        namespace["load_manifest"](key, done, lambda ds, rows: loaded[ds].extend(str(r["id"]) for r in rows))
    assert any(k.endswith(".parquet") for k in done) and any(k.endswith(".jsonl.gz") for k in done)
    for dataset, ids in loaded.items():
        assert sorted(ids) == sorted(export.ids(dataset)), f"{dataset}: every row once, from both formats"
