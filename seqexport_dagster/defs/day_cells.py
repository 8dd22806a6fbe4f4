"""Day cells: a dataset's UTC day turns green once every active export has finished it, and a cell
never contradicts its counters (issue 25).

One function decides and counts, from one read of the control plane (`cell_event`): a cell is
recorded only for a complete day, and its counters are those of the exports it stands for:
- ``exports_complete``: the active exports that had the dataset on that day, each of which has
  finished the day (a paused or deleted export does not hold a day back, and is not in the cell);
- ``windows``, ``rows``, ``files``, ``bytes``: those exports' latest committed windows of the day
  (the files of an export that is no longer active are not counted either).

Every cell is recorded by a run that targeted that day, never as a runless sensor event, so
Dagster's own view of the partition (Materialized, Failed, Materializing, and the partition page's
"Run … failed, and did not materialize this asset") agrees with the cell:
- the scheduler sensor requests a small ``export_job`` run tagged ``seqexport/trigger=cells`` for the
  days that completed since its last tick (`cell_requests`); the run checks again and records them.
  A runless event left a day green under a banner of its last failed run (the export that held it
  back was then paused, say), and "Failed (0)" in the counters beside it;
- a backfill or manual run of a day records the day again whenever it is complete after the run,
  before the run fails if it does: a failed re-delivery of a complete day leaves it green with true
  counters, and the run red; a day that is not complete gets no cell, so nothing claims it is;
- a scheduled run that appended late rows to a complete day records that day again, with its new
  counters;
- a run that delivers a day that a failed run left red records the day with why it is no longer
  red, whether the day is complete, and who still fails on it (`red_day_cells`, issue 42).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Final

import dagster as dg
import sqlalchemy as sa

from seqexport_dagster.contract.window import day_of
from seqexport_dagster.delivery import planner
from seqexport_dagster.management.health import failing_exports
from seqexport_dagster.store import ACTIVE, ExportRecord
from seqexport_dagster.store.fleet import day_totals

#: The trigger tag's value on the sensor's runs that record completed days.
CELLS: Final = "cells"
#: Dagster's tag on a run of one partition, and ours with a failed run's customer message.
PARTITION_TAG: Final = "dagster/partition"
ERROR_TAG: Final = "seqexport/error"
#: Days recorded per dataset and tick at most (a first tick after an upgrade catches up over a few).
MAX_DAYS_PER_TICK: Final = 31


def cell_exports(records: Iterable[ExportRecord], dataset: str, day: dt.date) -> list[ExportRecord] | None:
    """The active exports the day's cell stands for; None while the day is not complete."""
    exports = list(records)
    through = planner.dataset_complete_through(exports, dataset)
    if through is None or through < day:
        return None
    return [
        e
        for e in exports
        if e.status == ACTIVE and any(s.dataset == dataset and day_of(s.added_at) <= day for s in e.datasets)
    ]


def cell_event(
    engine: sa.Engine, records: Iterable[ExportRecord], dataset: str, day: dt.date, **extra: Any
) -> dg.AssetMaterialization | None:
    """The day's cell with its counters, or None: the day is not complete, or no active export has it."""
    exports = cell_exports(records, dataset, day)
    if not exports:
        return None
    totals = day_totals(engine, dataset, [day], [e.id for e in exports])[day]
    metadata: dict[str, Any] = {
        "exports_complete": len(exports),
        "accounts": len({e.account_id for e in exports}),
        "windows": totals.windows,
        "rows": totals.rows,
        "files": totals.files,
        "size_bytes": totals.bytes,  # the unit in the name: the UI shows a bare number
        **extra,
    }
    return dg.AssetMaterialization(asset_key=dataset, partition=day.isoformat(), metadata=metadata)


def cell_events(
    engine: sa.Engine, records: list[ExportRecord], days: Iterable[tuple[str, dt.date]], **extra: Any
) -> list[dg.AssetMaterialization]:
    events = (cell_event(engine, records, dataset, day, **extra) for dataset, day in sorted(set(days)))
    return [e for e in events if e is not None]


def completed_days(records: list[ExportRecord], through: dict[str, str]) -> dict[dt.date, list[str]]:
    """Per day, the datasets every active export has finished since ``through`` (the sensor cursor's,
    advanced here), at most `MAX_DAYS_PER_TICK` days per dataset."""
    out: dict[dt.date, list[str]] = {}
    for dataset in sorted({s.dataset for e in records for s in e.datasets}):
        complete = planner.dataset_complete_through(records, dataset)
        starts = [s.added_at for e in records for s in e.datasets if s.dataset == dataset]
        if complete is None or not starts:
            continue
        done = through.get(dataset)
        day = (
            max(day_of(min(starts)), dt.date.fromisoformat(done) + dt.timedelta(days=1))
            if done
            else day_of(min(starts))
        )
        count = 0
        while day <= complete and count < MAX_DAYS_PER_TICK:
            out.setdefault(day, []).append(dataset)
            through[dataset] = day.isoformat()
            day += dt.timedelta(days=1)
            count += 1
    return out


def cell_requests(job_name: str, days: dict[dt.date, list[str]], tags: dict[str, str]) -> list[dg.RunRequest]:
    """One small run per completed day, selecting the datasets completed on it."""
    return [
        dg.RunRequest(
            job_name=job_name,
            run_key=f"{CELLS}|{day.isoformat()}|{'+'.join(datasets)}",
            partition_key=day.isoformat(),
            asset_selection=[dg.AssetKey(d) for d in datasets],
            asset_check_keys=[],
            tags=tags,
        )
        for day, datasets in sorted(days.items())
    ]


def finished_day(records: Iterable[ExportRecord], dataset: str, day: dt.date) -> tuple[int, int]:
    """How many active exports with ``dataset`` on ``day`` have finished it, and how many there are."""
    having = [
        e
        for e in records
        if e.status == ACTIVE and any(s.dataset == dataset and day_of(s.added_at) <= day for s in e.datasets)
    ]
    done = [e for e in having if (planner.dataset_complete_through([e], dataset) or dt.date.min) >= day]
    return len(done), len(having)


def red_day_cells(
    instance: dg.DagsterInstance,
    records: list[ExportRecord],
    delivered: Iterable[str],
    day: dt.date,
    run_id: str,
    job_name: str,
) -> list[dg.AssetMaterialization]:
    """A day a failed run left red, which this run has since delivered for some export, is recorded
    with why it is no longer red (issue 42: it stayed red under a later successful run, with no
    banner and no metadata). Not a complete cell: ``complete`` says how many active exports have
    finished the day, ``still_failing`` who fails on it now, and the complete cell replaces this
    one when the day completes (`cell_requests`). Red is read as Dagster decides it: the day's
    latest failed run that targeted the dataset ended after the dataset's latest materialization
    of the day (this run's own planned materialization makes the partition's status "in progress",
    so the status cannot be asked). One run query, and one event query a dataset after a failure."""
    key = day.isoformat()
    failed = instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, statuses=[dg.DagsterRunStatus.FAILURE], tags={PARTITION_TAG: key}),
        limit=1,
    )
    if not failed or failed[0].end_time is None:
        return []
    run = failed[0].dagster_run
    out = []
    for dataset in delivered:
        asset = dg.AssetKey(dataset)
        if run.asset_selection is not None and asset not in run.asset_selection:
            continue
        latest = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=1
        ).records
        if latest and latest[0].timestamp >= failed[0].end_time:
            continue
        before = f"run {run.run_id[:8]} of this day failed ({run.tags.get(ERROR_TAG, 'see the run')})"
        done, having = finished_day(records, dataset, day)
        failing = [f"{f.account_id}/{f.export_id}" for f in failing_exports(records, dataset)]
        out.append(
            dg.AssetMaterialization(
                asset_key=dataset,
                partition=key,
                description=f"Not red: {before}; run {run_id[:8]} delivered this day since.",
                metadata={
                    "why_not_red": f"{before}; run {run_id[:8]} delivered this day since",
                    "complete": (
                        "yes" if done == having else f"no: {done} of {having} active exports have finished this day"
                    ),
                    "still_failing": ", ".join(failing[:10]) + (f" +{len(failing) - 10}" if len(failing) > 10 else "")
                    or "-",
                },
            )
        )
    return out
