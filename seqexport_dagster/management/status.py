"""What an export's status shows and what "export now" would write: pure functions over its record.

`api.Exports` reads the record and the clock and calls these; the HTTP API and the remote CLI
rebuild the same types from JSON (`presentation.status_from_json`). Nothing here opens a database.

Two kinds of delay, never mixed (issue 25): an event dataset is *behind* by how far its position
trails real time, while the daily snapshot is *late* only once its day is over and the snapshot is
still not written (``position + 1 day + lag``). Mixing them made a healthy export created at 17:00
look 17 h behind (its snapshot position is that day's midnight). A deleted export is neither: its
delays are ``None``. The Dagster status view (`seqexport_dagster.management.health`) reads the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS, Window, iso_ms, next_midnight
from seqexport_dagster.delivery.idle import next_scheduled
from seqexport_dagster.store import DELETED, DatasetState, ExportRecord


@dataclass(frozen=True, slots=True)
class LastError:
    """The latest failure of one dataset; shown until a run of that dataset succeeds."""

    dataset: str
    window: Window | None
    message: str
    at: int | None
    attempts: int
    next_retry_at: int | None


@dataclass(frozen=True, slots=True)
class DatasetStatus:
    dataset: str
    added_at: int
    #: Events: everything recorded up to here is in the bucket. Snapshot: the next day to snapshot.
    position_ms: int
    #: Events: how far the position trails real time (now − position). None for the snapshot and
    #: for a deleted export.
    behind_ms: int | None
    last_error: LastError | None
    #: Snapshot: how long the day at the position has been due (its end + lag) without being
    #: written; 0 before that. None for event datasets and for a deleted export.
    snapshot_late_ms: int | None = None
    #: Snapshot: when the day at the position is due (`snapshot_due_at`); None for event datasets.
    snapshot_due_at: int | None = None

    @property
    def is_snapshot(self) -> bool:
        return DATASETS[self.dataset].is_snapshot


@dataclass(frozen=True, slots=True)
class ExportStatus:
    export: ExportRecord
    now_ms: int
    datasets: tuple[DatasetStatus, ...]

    @property
    def last_error(self) -> LastError | None:
        """The export's most recent error across its datasets."""
        errors = [d.last_error for d in self.datasets if d.last_error is not None]
        return max(errors, key=lambda e: e.at or 0) if errors else None

    @property
    def position_ms(self) -> int | None:
        """The least advanced event dataset's position: where a stuck export is stuck. The snapshot's
        position (a midnight) only when the export has no event dataset."""
        events = [d.position_ms for d in self.datasets if not d.is_snapshot]
        return min(events or [d.position_ms for d in self.datasets], default=None)

    @property
    def behind_ms(self) -> int | None:
        """The most delayed event dataset's delay; None when deleted or without event datasets."""
        return max((d.behind_ms for d in self.datasets if d.behind_ms is not None), default=None)

    @property
    def snapshot_late_ms(self) -> int | None:
        """How late the daily snapshot is (0 while on time); None when deleted or without one."""
        return max((d.snapshot_late_ms for d in self.datasets if d.snapshot_late_ms is not None), default=None)


def _last_error(state: DatasetState) -> LastError | None:
    if state.last_error is None:
        return None
    return LastError(
        dataset=state.dataset,
        window=state.last_error_window,
        message=state.last_error,
        at=state.last_error_at,
        attempts=state.failures,
        next_retry_at=state.next_retry_at,
    )


@dataclass(frozen=True, slots=True)
class ExportNowPlan:
    """A saved "export now" request and the first window (or snapshot day) of each dataset it writes."""

    export: ExportRecord
    due: tuple[tuple[str, Window], ...]


def export_now_window(record: ExportRecord, state: DatasetState, now_ms: int) -> Window | None:
    """The first window "export now" writes for this dataset at ``now_ms``, or ``None``."""
    if DATASETS[state.dataset].is_snapshot:
        due = now_ms >= state.position_ms + DAY_MS + record.lag_ms or state.failures > 0
        return Window(state.position_ms, state.position_ms + DAY_MS) if due else None
    horizon = now_ms - record.lag_ms
    if state.position_ms >= horizon:
        return None
    return Window(state.position_ms, min(next_midnight(state.position_ms), horizon))


def nothing_due_message(record: ExportRecord, now_ms: int) -> str:
    """Why "export now" has nothing to write yet, and when it will."""
    horizon = now_ms - record.lag_ms
    events = [s for s in record.datasets if not DATASETS[s.dataset].is_snapshot]
    earliest = min((s.position_ms + record.lag_ms + 1 for s in events), default=None)
    schedule = min((next_scheduled(record, s) for s in record.datasets), key=lambda pair: pair[1])
    # A brand-new export has exported nothing: its datasets start at their creation, past now − lag.
    fresh = bool(events) and all(s.position_ms == s.added_at and s.position_ms >= horizon for s in events)
    text = (
        f"export {record.id} has nothing to export yet: it trails real time by its lag "
        f"({record.lag_ms // MINUTE_MS} min) so late writes are included, and "
    )
    if fresh:
        start = min(s.added_at for s in events)
        text += (
            f"it exports what is recorded from its creation ({iso_ms(start)}) on, after now − lag ({iso_ms(horizon)})"
        )
    else:
        text += f"everything recorded up to now − lag ({iso_ms(horizon)}) is already exported"
    if earliest is not None:
        text += f"; export now can write from {iso_ms(earliest)}"
    return text + f"; the next scheduled window {schedule[0]} is written at {iso_ms(schedule[1])}"


def snapshot_due_at(record: ExportRecord, state: DatasetState) -> int:
    """When the snapshot of the day at ``state``'s position is due: once that day is over, plus the lag."""
    return state.position_ms + DAY_MS + record.lag_ms


def dataset_status(record: ExportRecord, state: DatasetState, now_ms: int) -> DatasetStatus:
    """One dataset's position, its delay of the kind that fits it (see the module docstring), and its error."""
    snapshot = DATASETS[state.dataset].is_snapshot
    live = record.status != DELETED
    return DatasetStatus(
        dataset=state.dataset,
        added_at=state.added_at,
        position_ms=state.position_ms,
        behind_ms=max(0, now_ms - state.position_ms) if live and not snapshot else None,
        last_error=_last_error(state),
        snapshot_late_ms=max(0, now_ms - snapshot_due_at(record, state)) if live and snapshot else None,
        snapshot_due_at=snapshot_due_at(record, state) if snapshot else None,
    )


def export_status(record: ExportRecord, now_ms: int) -> ExportStatus:
    """State, each event dataset's delay behind ``now_ms``, the snapshot's lateness, and the last errors."""
    return ExportStatus(
        export=record,
        now_ms=now_ms,
        datasets=tuple(dataset_status(record, d, now_ms) for d in record.datasets),
    )
