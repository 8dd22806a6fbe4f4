"""The hourly refresh of ``export_status`` on a real instance: recorded in runs, deleted with them (issue 23)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from seqexport_dagster.contract.window import MINUTE_MS
from seqexport_dagster.defs.maintenance import delete_old_runs
from seqexport_dagster.defs.partitions import export_id_of
from seqexport_dagster.defs.sensors import Cursor
from seqexport_dagster.defs.status_refresh import REFRESH_EVERY_TICKS, REFRESH_JOB, SLOT_TAG, SLOTS, slot_of
from seqexport_dagster_tests.support.dagster_harness import Harness, harness

STATUS = dg.AssetKey("export_status")


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with harness(tmp_path, monkeypatch) as value:
        yield value


def status_observations(h: Harness) -> list[dg.EventLogEntry]:
    return list(h.instance.fetch_observations(STATUS, limit=10_000).records)  # type: ignore[arg-type]


def at_tick(h: Harness, tick: int) -> None:
    cursor = Cursor.parse(h.cursor)
    cursor.tick = tick
    h.cursor = cursor.dump()


def test_unchanged_status_is_refreshed_by_hourly_runs_and_deleted_with_them(h: Harness) -> None:
    exports = [h.world.local_export(f"acct{i}", frequency="24h", lag_ms=MINUTE_MS, folder=f"b{i}") for i in range(12)]
    paused = exports[-1]
    h.world.store.set_status(paused.id, "paused", h.world.clock())
    deleted = h.world.local_export("gone", frequency="24h", folder="gone")
    h.world.store.set_status(deleted.id, "deleted", h.world.clock())
    first = h.tick()
    assert not first.refresh_results and not status_observations(h)
    # The first tick registers every export's partition, the next records each once with a
    # materialization, outside any run (green from the start: issue 42); nothing is observed.
    second = h.tick()
    runless = list(h.instance.fetch_materializations(STATUS, limit=10_000).records)
    assert {r.event_log_entry.run_id for r in runless} == {""} and not status_observations(h)
    named = [f"{e.account_id}/{e.id}" for e in exports]
    assert sorted(r.partition_key for r in runless if r.partition_key != f"gone/{deleted.id}") == sorted(named)
    assert not second.refresh_results
    # Ticks without a change record nothing, until a refresh is due.
    assert not [e for e in h.tick(execute=False).asset_events if isinstance(e, dg.AssetObservation)]
    refreshed: Counter[str] = Counter()
    run_ids = []
    for slot in range(SLOTS):
        at_tick(h, (slot + 1) * REFRESH_EVERY_TICKS - 1)
        outcome = h.tick()
        (run,) = outcome.refresh_results
        assert run.success and run.dagster_run.job_name == REFRESH_JOB
        assert run.dagster_run.tags[SLOT_TAG] == str(slot) and not outcome.results
        events = [e for e in run.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        partitions = [e.event_specific_data.asset_observation.partition for e in events]
        assert all(slot_of(export_id_of(p)) == slot for p in partitions)
        refreshed.update(partitions)
        if partitions:  # 12 exports in 6 slices: a slice may be empty
            run_ids.append(run.run_id)
    # Six runs, one a slice: every export that is not deleted once, paused ones included.
    assert refreshed == Counter({p: 1 for p in named}), "each export refreshed exactly once in 6 hours"
    in_runs = [r for r in status_observations(h) if r.event_log_entry.run_id]
    assert {r.event_log_entry.run_id for r in in_runs} == set(run_ids)
    latest = {r.partition_key: r.asset_observation.metadata for r in in_runs}  # type: ignore[union-attr]
    assert latest[named[-1]]["status"].value == "paused" and latest[named[0]]["health"].value == "ok"
    # The maintenance job's run retention deletes the refreshes with their runs; the changes stay.
    assert delete_old_runs(h.instance, 1, now_s=time.time() + 2 * 86_400) >= SLOTS
    assert not status_observations(h)
    assert len(list(h.instance.fetch_materializations(STATUS, limit=10_000).records)) == len(runless)


def test_a_refresh_run_with_a_slot_out_of_range_fails_naming_the_field(h: Harness) -> None:
    h.world.local_export("acme", frequency="24h", folder="b")
    job = h.definitions().resolve_job_def(REFRESH_JOB)
    result = job.execute_in_process(
        instance=h.instance,
        run_config={"ops": {"refresh_export_status": {"config": {"slot": SLOTS}}}},
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"slot must be between 0 and {SLOTS - 1}" in failure.step_failure_data.error.message
    assert not status_observations(h)
