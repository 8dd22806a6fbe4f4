"""The assets on a real instance: backfills rewrite with the same names, grid days, retry policy."""

from __future__ import annotations

import pytest

from seqexport_dagster.defs.assets import REPLACE_TAG
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


def test_backfill_of_a_complete_day_writes_nothing_and_replace_is_explicit(h):
    export = h.world.local_export(datasets=("email_events", "subscribers"), frequency="6h")
    for hours in (7, 13, 24):
        h.world.clock.now_ms = DAY0 + hours * HOUR_MS + 2 * MINUTE_MS
        assert all(r.success for r in h.tick().results)
    bucket = h.world.root / "bucket"
    before = {p: p.read_bytes() for p in bucket.rglob("*.gz")}
    windows = h.world.store.committed_windows(export.id, "email_events", D0)
    assert [w.to_ms - DAY0 for w in windows] == [6 * HOUR_MS, 12 * HOUR_MS, 24 * HOUR_MS]

    h.world.clock.advance(3 * HOUR_MS)
    result = h.run(export.id, D0, ["email_events", "subscribers"], tags={"dagster/backfill": "bf1"})
    assert result.success
    assert {p: p.read_bytes() for p in bucket.rglob("*.gz")} == before, "a backfill never replaces a file"
    assert h.world.store.committed_windows(export.id, "email_events", D0) == windows
    mats = [m for m in h.materializations("email_events") if m.asset_materialization.metadata["rewrite"].value]
    assert len(mats) == 1 and mats[0].asset_materialization.metadata["windows"].value == 3
    (snap,) = [m for m in h.materializations("subscribers") if m.run_id == result.run_id]
    assert "snapshot_taken_at" not in snap.asset_materialization.metadata, "the snapshot exists: not retaken"

    # Replacing is an operator's explicit choice (a tag): the day is rewritten under the same names.
    result = h.run(
        export.id, D0, ["email_events", "subscribers"], tags={"dagster/backfill": "bf2", REPLACE_TAG: "true"}
    )
    assert result.success
    assert sorted(bucket.rglob("*.gz")) == sorted(before), "the same names, nothing new"
    rows = bucket_rows(bucket, "email_events")
    assert len(rows) == len({r["id"] for r in rows})
    (snap,) = [m for m in h.materializations("subscribers") if m.run_id == result.run_id]
    assert snap.asset_materialization.metadata["snapshot_taken_at"].value == "2026-10-01T03:02:00.000Z"


def test_backfill_of_a_day_before_the_export_existed_writes_nothing(h):
    h.world.clock.now_ms = DAY0 + DAY_MS + 10 * HOUR_MS
    export = h.world.local_export(datasets=("email_events",), frequency="1h")
    result = h.run(export.id, D0, ["email_events"])
    assert result.success
    assert h.world.store.committed_windows(export.id, "email_events", D0) == []
    assert not (h.world.root / "bucket" / "email_events").exists(), "nothing before the dataset's start"


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
    assert not result.success
    types = [e.event_type_value for e in result.all_events]
    assert types.count("STEP_UP_FOR_RETRY") == 2 and types.count("STEP_FAILURE") == 1
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state.failures == 1 and state.next_retry_at == h.world.clock() + 15 * MINUTE_MS
    assert state.last_error
