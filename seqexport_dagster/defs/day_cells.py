"""The dataset assets' day cells: a day turns green when every active export has finished it.

The sensor materializes the cell with the day's totals over every export. A day of 10,000 exports
at 15 minutes is 960,000 ledger windows per dataset, about 2 s of PostgreSQL in one query, so a
tick sums a bounded span of a day (issue 29) and carries the running totals in its cursor.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

import dagster as dg
import sqlalchemy as sa

from seqexport_dagster import planner
from seqexport_dagster.defs.health import day_event
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.store import ExportRecord
from seqexport_dagster.store.fleet import DayTotals, span_totals
from seqexport_dagster.window import DAY_MS, MINUTE_MS, day_of, day_start_ms, frequency_ms

MAX_DAYS_PER_TICK: Final = 31
#: Ledger windows a tick reads at most for day cells (about 0.1 s on PostgreSQL).
DAY_WINDOWS_PER_TICK: Final = 50_000
#: The finest scheduling grid: a span of a day is a whole number of these.
SLOT_MS: Final = 15 * MINUTE_MS


def windows_per_slot(records: list[ExportRecord], dataset: str) -> float:
    """Ledger windows per `SLOT_MS` of a day over every export with ``dataset`` (an upper bound of
    what a span's totals read: scheduled windows on each export's grid, a snapshot once a day)."""
    snapshot = DATASETS[dataset].is_snapshot
    per_slot = 0.0
    for export in records:
        if any(s.dataset == dataset for s in export.datasets):
            per_slot += SLOT_MS / DAY_MS if snapshot else SLOT_MS / min(frequency_ms(export.frequency), DAY_MS)
    return per_slot


def exports_complete(records: list[ExportRecord], dataset: str, day: dt.date) -> int:
    """Exports with ``dataset`` on ``day`` (added before its end) whose position has passed it."""
    end = day_start_ms(day) + DAY_MS
    return sum(
        1
        for e in records
        for s in e.datasets
        if s.dataset == dataset and s.added_at < end and planner.complete_through(s) >= day
    )


def day_events(
    engine: sa.Engine, records: list[ExportRecord], through: dict[str, str], pending: dict[str, list[Any]]
) -> list[dg.AssetMaterialization]:
    """Days every active export has finished since the last tick, per dataset, with their totals.

    A tick reads at most about `DAY_WINDOWS_PER_TICK` ledger windows for them (issue 29): a day is
    summed a span at a time (`fleet.span_totals`), its running totals kept in the sensor's cursor
    (``pending``: dataset -> [day, next span's from_ms, windows, rows, files, bytes]; ``through``:
    each dataset's last green day, both updated here), and its cell is materialized when its last
    span is in. A small fleet turns up to `MAX_DAYS_PER_TICK` days green in one tick; 10,000
    exports at 15 minutes take 20 ticks a dataset-day (10 minutes). Late rows delivered after a day
    turned green are not in its totals (as before).
    """
    events = []
    budget = float(DAY_WINDOWS_PER_TICK)
    for dataset in DATASETS:
        last = planner.dataset_complete_through(records, dataset)
        starts = [s.added_at for e in records for s in e.datasets if s.dataset == dataset]
        if last is None or not starts or budget <= 0:
            continue
        first = day_of(min(starts))
        done = through.get(dataset)
        day = max(first, dt.date.fromisoformat(done) + dt.timedelta(days=1)) if done else first
        if day > last:
            continue
        rate = max(windows_per_slot(records, dataset), 1.0)
        finished = 0
        while day <= last and finished < MAX_DAYS_PER_TICK and budget > 0:
            start = day_start_ms(day)
            summing = pending.get(dataset)
            if summing and summing[0] == day.isoformat():
                lo, totals = int(summing[1]), [int(v) for v in summing[2:]]
            else:
                lo, totals = start, [0, 0, 0, 0]
            slots = max(1, int(budget // rate))
            hi = min(start + DAY_MS, lo + slots * SLOT_MS)
            span = span_totals(engine, dataset, lo, hi)
            budget -= rate * (hi - lo) / SLOT_MS
            totals = [a + b for a, b in zip(totals, (span.windows, span.rows, span.files, span.bytes), strict=True)]
            if hi < start + DAY_MS:
                pending[dataset] = [day.isoformat(), hi, *totals]
                break
            pending.pop(dataset, None)
            events.append(day_event(dataset, day, DayTotals(exports_complete(records, dataset, day), *totals)))
            through[dataset] = day.isoformat()
            day += dt.timedelta(days=1)
            finished += 1
    return events
