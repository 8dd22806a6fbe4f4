"""The dataset assets on a real instance: date backfills for all or chosen exports, export starts, retries."""

from __future__ import annotations

import dagster as dg
import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, iso_ms
from seqexport_dagster.delivery.day_run import REPLACE_TAG
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster_tests.support.dagster_harness import harness
from seqexport_dagster_tests.support.local_bucket import bucket_rows
from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"


@pytest.fixture
def h(tmp_path, monkeypatch):
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(40, 10, 3, 5))
        yield value


def test_a_date_backfill_delivers_what_each_exports_day_lacks_and_replace_is_explicit(h):
    export = h.world.local_export(datasets=("email_events", "subscribers"), frequency="6h")
    h.world.local_export(datasets=("email_events",), frequency="6h", folder="other")
    for hours in (7, 13, 24):
        h.world.clock.now_ms = DAY0 + hours * HOUR_MS + 2 * MINUTE_MS
        assert all(r.success for r in h.tick().results)
    bucket = h.world.root / "bucket"
    before = {p: p.read_bytes() for p in bucket.rglob("*.gz")}
    windows = h.world.store.committed_windows(export.id, "email_events", D0)
    assert [w.to_ms - DAY0 for w in windows] == [6 * HOUR_MS, 12 * HOUR_MS, 24 * HOUR_MS]

    h.world.clock.advance(3 * HOUR_MS)
    # A row recorded at 01:00 becomes visible only now; a UI backfill of the day names no export, so
    # every active export delivers what its day lacks: the late row, as a new part, nothing else.
    late_at = iso_ms(DAY0 + HOUR_MS)
    insert_rows(
        h.world.source_engine,
        "email_events",
        [("acme", "eev_late_0001", "delivered", late_at, late_at, "sub_acme_0000001", "late@example.com",
          None, None, "msg_late_1", "Late", None, None, None, None, None)],
    )  # fmt: skip
    others = {p: p.read_bytes() for p in (h.world.root / "other").rglob("*.gz")}
    result = h.run(None, D0, ["email_events", "subscribers"], tags={"dagster/backfill": "bf1"})
    assert result.success
    for root, old in ((bucket, before), (h.world.root / "other", others)):
        now = {p: p.read_bytes() for p in root.rglob("*.gz")}
        assert {p: now[p] for p in old} == old, "a backfill never replaces a file"
        (new,) = set(now) - set(old)
        assert new.name.startswith(f"email_events-{DAY0}-{DAY0 + 6 * HOUR_MS}-"), new.name
        ids = [r["id"] for r in bucket_rows(root, "email_events")]
        assert ids.count("eev_late_0001") == 1 and len(ids) == len(set(ids))
    assert h.world.store.committed_windows(export.id, "email_events", D0) == windows
    before = {p: p.read_bytes() for p in bucket.rglob("*.gz")}
    mats = [m for m in h.materializations("email_events") if m.run_id == result.run_id]
    assert len(mats) == 1 and mats[0].asset_materialization.metadata["exports_complete"].value == 2
    assert mats[0].asset_materialization.partition == D0

    # Replacing is an operator's explicit choice (a tag): the day is rewritten under the same names.
    result = h.run(
        [export.id], D0, ["email_events", "subscribers"], tags={"dagster/backfill": "bf2", REPLACE_TAG: "true"}
    )
    assert result.success
    assert sorted(bucket.rglob("*.gz")) == sorted(before), "the same names, nothing new"
    rows = bucket_rows(bucket, "email_events")
    assert len(rows) == len({r["id"] for r in rows})
    snapshots = [w for w in h.world.store.ledger(export.id, dataset="subscribers") if w.run_id == result.run_id]
    assert [w.snapshot_taken_at for w in snapshots] == [DAY0 + DAY_MS + 3 * HOUR_MS + 2 * MINUTE_MS], "retaken now"


def test_a_backfill_never_writes_before_an_export_existed(h):
    first = h.world.local_export(datasets=("email_events",), frequency="6h", folder="first")
    h.world.clock.now_ms = DAY0 + DAY_MS + 10 * HOUR_MS
    export = h.world.local_export(datasets=("email_events",), frequency="1h")
    # Days before the first export are not partitions at all.
    with pytest.raises(dg.DagsterUnknownPartitionError):
        h.run([export.id], "2026-09-29", ["email_events"])
    # D0 is a partition (the first export's), but not a day of the second export: nothing is written.
    result = h.run(None, D0, ["email_events"])
    assert result.success
    assert h.world.store.ledger(export.id) == [], "nothing attempted for a day before the export"
    assert not list((h.world.root / "bucket").rglob("*.jsonl.gz"))
    assert len(h.world.store.committed_windows(first.id, "email_events", D0)) == 1


def test_launch_config_chooses_the_exports_of_a_redelivery(h):
    chosen = h.world.local_export(datasets=("email_events",), frequency="1h", folder="c")
    left = h.world.local_export(datasets=("email_events",), frequency="1h", folder="l")
    h.world.clock.now_ms = DAY0 + 3 * HOUR_MS + 2 * MINUTE_MS
    result = h.run([chosen.id], D0, ["email_events"])
    assert result.success
    assert len(h.world.store.committed_windows(chosen.id, "email_events", D0)) == 1
    assert h.world.store.ledger(left.id) == []


def test_transient_errors_are_retried_in_the_run_and_counted_once_for_backoff(h):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused, retryable
    export = h.world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3", "bkt", region="us-east-1", endpoint=dead, access_key_id="AKIAX", secret_access_key="s"
        ),
        datasets=("email_events",),
        frequency="15m",
        lag_ms=2 * MINUTE_MS,
        now_ms=DAY0,
    )
    h.world.clock.now_ms = DAY0 + 17 * MINUTE_MS
    (result,) = h.tick().results
    # The export's failure is recorded for the export; a run of that one export fails with it.
    assert not result.success and h.instance.get_run_by_id(result.run_id).status.value == "FAILURE"
    attempts = h.world.store.ledger(export.id)
    assert [w.status for w in attempts] == ["failed"] * 3, "three attempts in the run"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state.failures == 1 and state.next_retry_at == h.world.clock() + 15 * MINUTE_MS
    assert state.last_error
