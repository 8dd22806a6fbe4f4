"""What the scheduler sensor launches: a pure function of the control plane's state and the time.

No dagster import, so the whole policy (due windows, lag, backoff, "export now", pause, one run per
export) is tested without an instance, and the sensor stays a few lines of wiring.

One work item is one run: one export, one UTC day, the datasets that have work due on that day.
Only the earliest day of an export is requested per tick: the next day follows once this run has
moved the positions (a catch-up after a pause or outage is therefore a sequence of whole-day runs,
in order, never two runs of one export at once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.schema import DATASETS
from seqexport_dagster.store.store import ACTIVE, DatasetState, ExportRecord
from seqexport_dagster.window import DAY_MS, MINUTE_MS, day_of, due_windows

#: A run that ended without moving any position (worker crash, terminated from the UI) is
#: requested again after at most this long: the slot is part of the run key.
RELAUNCH_SLOT_MS: Final = 15 * MINUTE_MS


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One run to request. ``run_key`` changes whenever the work would differ."""

    export_id: str
    day: dt.date
    datasets: tuple[str, ...]
    run_key: str
    export_now: bool = False


def waiting_for_backoff(export: ExportRecord, state: DatasetState, now_ms: int) -> bool:
    """True while the dataset waits out min(frequency × 2^(n−1), 6 h); "export now" skips the wait."""
    if state.next_retry_at is None or now_ms >= state.next_retry_at:
        return False
    return not export.export_now_pending(state)


def due_day(export: ExportRecord, state: DatasetState, now_ms: int) -> dt.date | None:
    """The first UTC day on which this dataset has work due now, or ``None``."""
    if waiting_for_backoff(export, state, now_ms):
        return None
    if DATASETS[state.dataset].is_snapshot:
        # The snapshot of day D is taken once D is over plus the lag; position is D's midnight.
        return day_of(state.position_ms) if now_ms >= state.position_ms + DAY_MS + export.lag_ms else None
    windows = due_windows(
        state.position_ms,
        now_ms,
        frequency=export.frequency,
        lag_ms=export.lag_ms,
        export_now=export.export_now_pending(state),
    )
    return windows[0].day if windows else None


def run_key(export: ExportRecord, day: dt.date, states: Iterable[DatasetState], now_ms: int) -> str:
    """Export, day, config version, each dataset's position and failure count, and the relaunch slot.

    The config version moves on pause/resume, "export now" and any edit, so a run canceled by a
    pause is requested again after the resume; positions and failure counts move with every
    committed or failed window, so finished work is never requested twice.
    """
    parts = ",".join(f"{s.dataset}@{s.position_ms}x{s.failures}" for s in states)
    return f"{export.id}|{day.isoformat()}|v{export.config_version}|{parts}|s{now_ms // RELAUNCH_SLOT_MS}"


def work_for(export: ExportRecord, now_ms: int) -> WorkItem | None:
    """The next run of one export, or ``None`` when nothing is due (or it is paused/deleted)."""
    if export.status != ACTIVE:
        return None
    days = {s.dataset: due_day(export, s, now_ms) for s in export.datasets}
    pending = [d for d in days.values() if d is not None]
    if not pending:
        return None
    first = min(pending)
    states = [s for s in export.datasets if days[s.dataset] == first]
    return WorkItem(
        export_id=export.id,
        day=first,
        datasets=tuple(s.dataset for s in states),
        run_key=run_key(export, first, states, now_ms),
        export_now=any(export.export_now_pending(s) for s in states),
    )


def due_work(exports: Iterable[ExportRecord], now_ms: int, *, busy: Collection[str] = ()) -> list[WorkItem]:
    """Every run to request this tick; exports in ``busy`` already have a run queued or running."""
    items = []
    for export in exports:
        if export.id in busy:
            continue
        item = work_for(export, now_ms)
        if item is not None:
            items.append(item)
    return items
