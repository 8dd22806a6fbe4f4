"""Issue 25, "day cells never contradict their counters", on a real Dagster instance.

After every step the day's cell is read as the UI reads it, from Dagster's own storage: its
partition status (materialized, failed, materializing: the counters of the Partitions tab), the
partition page's banner ("Run … failed, and did not materialize this asset": the latest run that
targeted the day, when it is not the run of the latest materialization), and the latest
materialization's counters. They must agree with each other and with the control plane and the
source: a complete day is green with no failed-run banner, and its counters are its exports' and
the source's; a day that is not complete has no cell claiming it is.

Steps: one export fails (a file where its folder should be) while the other completes the day;
the failing one's run is the day's last before it is paused (the day then completes: this used to
leave a green cell under that failed run's banner); late rows appear in the complete day and the
next scheduled run appends them; a backfill of the day fails.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.defs.day_cells import cell_exports
from seqexport_dagster.defs.resources import OperatorResource
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.store import PAUSED
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"
DATASET = "email_events"


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # Scheduled runs reconcile 3 h back (late rows reach a complete day through the next day's runs).
    monkeypatch.setattr(OperatorResource, "reconcile_lateness_ms", lambda self: 3 * HOUR_MS)
    with harness(tmp_path, monkeypatch) as value:
        for account in ("acme", "globex"):
            generate_account(value.world.source_engine, account, DAY0, DAY0 + 2 * DAY_MS, scale=Scale(30, 10, 1, 2))
        yield value


@dataclass(frozen=True)
class CellView:
    status: str  # "materialized", "failed", "materializing" or "missing", as the Partitions tab counts it
    banner: str | None  # the partition page's "Run … failed/canceled" banner, with the run's status
    metadata: dict[str, Any] | None  # the latest materialization's counters
    runs_targeting: int


def cell_view(h: Harness, day: str) -> CellView:
    key = dg.AssetKey(DATASET)
    partitions_def = h.definitions().resolve_assets_def(key).partitions_def
    cache = get_and_update_asset_status_cache_value(h.instance, key, partitions_def)
    assert partitions_def is not None

    def has(subset: Any) -> bool:
        return subset is not None and day in subset.get_partition_keys()

    if cache is None:
        status = "missing"
    elif has(cache.deserialize_failed_partition_subsets(partitions_def)):
        status = "failed"
    elif has(cache.deserialize_in_progress_partition_subsets(partitions_def)):
        status = "materializing"
    elif has(cache.deserialize_materialized_partition_subsets(partitions_def)):
        status = "materialized"
    else:
        status = "missing"
    records = h.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[day]), limit=1
    ).records
    latest = records[0] if records else None
    planned = h.instance.get_latest_planned_materialization_info(key, partition=day)
    banner = None
    # The UI's rule (AssetPartitionDetail.tsx): the latest run that planned the partition, when it is
    # not the latest materialization's run, and failed or was canceled.
    if planned is not None and (latest is None or latest.run_id != planned.run_id):
        run = h.instance.get_run_by_id(planned.run_id)
        if run is not None and run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
            banner = run.status.value
    metadata = {k: v.value for k, v in latest.asset_materialization.metadata.items()} if latest is not None else None
    runs = h.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": day}))
    return CellView(status, banner, metadata, len(runs))


def assert_agrees(h: Harness, day: str = D0) -> CellView:
    view = cell_view(h, day)
    records = h.world.store.list_exports()
    exports = cell_exports(records, DATASET, dt.date.fromisoformat(day))
    start = DAY0 + (dt.date.fromisoformat(day) - dt.date.fromisoformat(D0)).days * DAY_MS
    if exports:  # complete: green, no failed run over it, its exports' and the source's counters
        assert view.status == "materialized" and view.banner is None, view
        assert view.metadata is not None
        assert view.metadata["exports_complete"] == len(exports), view
        assert view.metadata["accounts"] == len({e.account_id for e in exports})
        source = sum(h.world.source.count_window(DATASET, e.account_id, Window(start, start + DAY_MS)) for e in exports)
        assert view.metadata["rows"] == source, (view, source)
        committed = [w for e in exports for w in h.world.store.committed_windows(e.id, DATASET, day)]
        assert view.metadata["windows"] == len(committed) and view.metadata["files"] >= len(committed)
    else:  # not complete: no cell says it is
        assert view.status != "materialized" and view.metadata is None, view
    return view


def tick_at(h: Harness, at_ms: int) -> Any:
    h.world.clock.now_ms = at_ms
    outcome = h.tick()
    assert_agrees(h)
    return outcome


def test_a_day_cell_agrees_with_its_counters_and_dagsters_status_through_failures_late_rows_and_a_backfill(
    h: Harness,
) -> None:
    good = h.world.local_export("acme", datasets=(DATASET,), frequency="1h", lag_ms=2 * MINUTE_MS)
    blocked = h.world.root / "blocked"
    blocked.write_text("a file where the bucket folder should be")
    bad = h.world.local_export("globex", datasets=(DATASET,), frequency="1h", lag_ms=2 * MINUTE_MS, folder="blocked")

    # The day goes by: the good export finishes it, the bad one fails (in backoff), in shared runs.
    for hour in range(1, 25):
        tick_at(h, DAY0 + hour * HOUR_MS + 3 * MINUTE_MS)
    assert cell_view(h, D0).metadata is None
    # The day's last run is the bad export's retry, alone (the good one is on the next day): it fails,
    # so the day is red.
    state = h.world.store.get_export(bad.id).dataset_state(DATASET)
    assert state is not None and state.next_retry_at is not None and state.next_retry_at > DAY0 + DAY_MS
    outcome = tick_at(h, state.next_retry_at + MINUTE_MS)
    by_day = {r.dagster_run.tags["dagster/partition"]: r.success for r in outcome.results}
    assert by_day[D0] is False, by_day
    view = cell_view(h, D0)
    assert view.status == "failed" and view.metadata is None, view

    # Paused, the bad export no longer holds the day back: the day completes. Its cell is recorded
    # by a run that targets the day, so the failed run's banner is gone and the status is green.
    h.world.store.set_status(bad.id, PAUSED, h.world.clock())
    outcome = tick_at(h, h.world.clock() + MINUTE_MS)
    (cells,) = outcome.cell_results
    assert cells.success
    view = assert_agrees(h)
    assert view.metadata is not None and view.metadata["exports_complete"] == 1 and view.metadata["rows"] > 0

    # Late rows appear in the complete day; the next day's scheduled run appends them and records
    # the day again with its new counters.
    before = view.metadata["rows"]
    late_at = iso_ms(DAY0 + DAY_MS - 30 * MINUTE_MS)
    insert_rows(
        h.world.source_engine,
        DATASET,
        [("acme", f"eev_cell_late_{i}", "delivered", late_at, late_at, "sub_acme_0000001", "late@example.com",
          None, None, f"msg_cell_late_{i}", "Late", None, None, None, None, None) for i in range(3)],
    )  # fmt: skip
    outcome = tick_at(h, h.world.clock() + HOUR_MS)
    assert outcome.results and all(r.success for r in outcome.results)
    view = assert_agrees(h)
    assert view.metadata is not None and view.metadata["rows"] == before + 3 and view.metadata["late_rows"]

    # A backfill of the complete day that fails (an operator's replace, while the good export's folder
    # is a file): the run is red, the day stays green with true counters, no failed-run banner on it.
    bucket = h.world.root / "bucket"
    shutil.move(bucket, h.world.root / "bucket-away")
    bucket.write_text("not a folder any more")
    result = h.run([good.id], D0, [DATASET], tags={"dagster/backfill": "cells", "seqexport/replace": "true"})
    assert not result.success
    view = assert_agrees(h)
    assert view.metadata is not None and view.metadata["rows"] == before + 3
    assert view.metadata["backfill"].startswith("backfill sent")
    # And a backfill that succeeds records the day again, the same.
    bucket.unlink()
    shutil.move(h.world.root / "bucket-away", bucket)
    result = h.run([good.id], D0, [DATASET], tags={"dagster/backfill": "cells2"})
    assert result.success
    assert assert_agrees(h).runs_targeting >= 4


def test_a_day_a_failed_run_left_red_says_why_it_is_not_red_once_a_later_run_delivers_it(h: Harness) -> None:
    """Issue 42: a day stayed red under a later successful run of that day, with no banner and no
    metadata. The later run records the day with why it is no longer red, and that it is not complete."""
    blocked = h.world.root / "blocked"
    blocked.write_text("a file where the bucket folder should be")
    bad = h.world.local_export("globex", datasets=(DATASET,), frequency="1h", lag_ms=2 * MINUTE_MS, folder="blocked")
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    outcome = h.tick()
    assert [r.success for r in outcome.results] == [False]
    assert cell_view(h, D0).status == "failed"
    later = h.world.clock() + MINUTE_MS
    h.world.clock.now_ms = DAY0  # created with the other: its first window is due at once
    h.world.local_export("acme", datasets=(DATASET,), frequency="1h", lag_ms=2 * MINUTE_MS)
    h.world.clock.now_ms = later
    outcome = h.tick()
    assert outcome.results and all(r.success for r in outcome.results)
    view = cell_view(h, D0)
    assert view.status == "materialized" and view.banner is None and view.metadata is not None, view
    assert (
        "of this day failed" in view.metadata["why_not_red"]
        and "delivered this day since" in view.metadata["why_not_red"]
    )
    assert view.metadata["complete"] == "no: 0 of 2 active exports have finished this day"
    assert view.metadata["still_failing"] == f"globex/{bad.id}"
