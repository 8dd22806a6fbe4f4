"""The dataset assets on a real instance: date backfills for all or chosen exports, export starts, retries."""

from __future__ import annotations

import dagster as dg
import pytest

from seqexport_dagster.destination.base import DestinationConfig
from seqexport_dagster.source.generator import Scale, generate_account
from seqexport_dagster.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster_tests.dagster_harness import harness
from seqexport_dagster_tests.moto_server import free_port
from seqexport_dagster_tests.test_sensor import bucket_rows
from seqexport_dagster_tests.world import DAY0

D0 = "2026-09-30"


@pytest.fixture
def h(tmp_path, monkeypatch):
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(40, 10, 3, 5))
        yield value


def names(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".seqexport-tmp" not in str(p)}


def test_a_date_backfill_redelivers_the_day_for_every_export_with_the_same_names(h):
    export = h.world.local_export(datasets=("email_events", "subscribers"), frequency="6h")
    other = h.world.local_export(datasets=("email_events",), frequency="6h", folder="other")
    for hours in (7, 13, 24):
        h.world.clock.now_ms = DAY0 + hours * HOUR_MS + 2 * MINUTE_MS
        assert all(r.success for r in h.tick().results)
    bucket = h.world.root / "bucket"
    before = names(bucket)
    windows = h.world.store.committed_windows(export.id, "email_events", D0)
    assert [w.to_ms - DAY0 for w in windows] == [6 * HOUR_MS, 12 * HOUR_MS, 24 * HOUR_MS]

    h.world.clock.advance(3 * HOUR_MS)
    # A UI backfill of the day: no export named, so every active export re-delivers it.
    result = h.run(None, D0, ["email_events", "subscribers"], tags={"dagster/backfill": "bf1"})
    assert result.success
    assert names(bucket) == before, "a backfill writes the same names, never new ones"
    assert h.world.store.committed_windows(export.id, "email_events", D0) == windows
    rewritten = {w.run_id for w in h.world.store.ledger(other.id) if w.run_id == result.run_id}
    assert rewritten == {result.run_id}, "the other export re-delivered the day in the same run"
    rows = bucket_rows(bucket, "email_events")
    assert len(rows) == len({r["id"] for r in rows})
    mats = [m for m in h.materializations("email_events") if m.run_id == result.run_id]
    assert len(mats) == 1 and mats[0].asset_materialization.metadata["exports_complete"].value == 2
    assert mats[0].asset_materialization.partition == D0


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
    assert result.success, "the export's failure is recorded for the export, not the batch"
    attempts = h.world.store.ledger(export.id)
    assert [w.status for w in attempts] == ["failed"] * 3, "three attempts in the run"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state.failures == 1 and state.next_retry_at == h.world.clock() + 15 * MINUTE_MS
    assert state.last_error
