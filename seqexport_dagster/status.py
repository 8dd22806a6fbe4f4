"""What an export's status shows and what "export now" would write: pure functions over its record.

`api.Exports` reads the record and the clock and calls these; the HTTP API and the remote CLI
rebuild the same types from JSON (`presentation.status_from_json`). Nothing here opens a database.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqexport_dagster.idle import next_scheduled
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.store import DELETED, DatasetState, ExportRecord
from seqexport_dagster.window import DAY_MS, MINUTE_MS, Window, iso_ms, next_midnight


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
    #: How far the position trails real time (now − position).
    behind_ms: int
    last_error: LastError | None


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
    text = (
        f"export {record.id} has nothing to export yet: it trails real time by its lag "
        f"({record.lag_ms // MINUTE_MS} min) so late writes are included, and everything recorded up to "
        f"now − lag ({iso_ms(horizon)}) is already exported"
    )
    if earliest is not None:
        text += f"; export now can write from {iso_ms(earliest)}"
    return text + f"; the next scheduled window {schedule[0]} is written at {iso_ms(schedule[1])}"


def export_status(record: ExportRecord, now_ms: int) -> ExportStatus:
    """State, each dataset's position and lag behind ``now_ms``, and the last errors."""
    # A deleted export stopped at deleted_at: its delay is frozen there, not growing forever.
    behind_at = record.deleted_at if record.status == DELETED and record.deleted_at is not None else now_ms
    return ExportStatus(
        export=record,
        now_ms=now_ms,
        datasets=tuple(
            DatasetStatus(
                dataset=d.dataset,
                added_at=d.added_at,
                position_ms=d.position_ms,
                behind_ms=max(0, behind_at - d.position_ms),
                last_error=_last_error(d),
            )
            for d in record.datasets
        ),
    )
