"""The window runner and the snapshot runner: the only code that writes into a customer's bucket.

Order of operations for one window, and why:
1. Re-read the export before every file. Paused or deleted: stop before the file, leave the window
   uncommitted (`RunInterrupted`). Destination changed: start the window over at the new place.
2. Write parts 0000.. in ``(recorded_at, id)`` order, recording each in the ledger as it lands.
3. Overwrite part numbers that an earlier attempt wrote beyond this attempt's count with an empty
   gzip: we may not delete, and a reader must never see a row twice.
4. Commit: ledger row and position in one transaction. Nothing before this point is visible as
   progress, so a crash anywhere above is repaired by rewriting the same names.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from seqexport_dagster.destination.base import Destination, DestinationConfig, OperatorPolicy, open_destination
from seqexport_dagster.errors import ExportError, RunInterrupted
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store.store import (
    ACTIVE,
    COMMITTED,
    ControlPlane,
    DatasetState,
    ExportRecord,
    location_of,
    snapshot_window,
)
from seqexport_dagster.window import (
    DAY_MS,
    PART_LIMIT,
    Window,
    chain,
    day_start_ms,
    due_windows,
    grid_windows,
    part_key,
    snapshot_part_key,
    success_key,
)
from seqexport_dagster.writer import EMPTY_GZIP, Part, PartWriter

_Report = TypeVar("_Report", "WindowReport", "SnapshotReport")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class WindowReport:
    dataset: str
    window: Window
    rows: int
    parts: int
    bytes: int
    blanked: int
    advanced: bool
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    day: dt.date
    rows: int
    parts: int
    bytes: int
    blanked: int
    snapshot_taken_at: int
    restarts: int = 0


@dataclass(slots=True)
class DayReport:
    """What one (export, dataset, day) run did, and whether the day's folder is now complete."""

    export_id: str
    dataset: str
    day: dt.date
    windows: list[WindowReport] = field(default_factory=list)
    snapshot: SnapshotReport | None = None
    complete: bool = False
    position_ms: int | None = None

    @property
    def rows(self) -> int:
        return sum(w.rows for w in self.windows) + (self.snapshot.rows if self.snapshot else 0)

    @property
    def files(self) -> int:
        return sum(w.parts for w in self.windows) + (self.snapshot.parts + 1 if self.snapshot else 0)

    @property
    def bytes(self) -> int:
        return sum(w.bytes for w in self.windows) + (self.snapshot.bytes if self.snapshot else 0)


class _DestinationChanged(Exception):
    """Internal signal: restart the current window or snapshot at the new destination."""


class _Attempt:
    """One attempt at one window or snapshot, at one destination version."""

    def __init__(self, runner: Runner, export: ExportRecord) -> None:
        self.runner = runner
        self.export = export
        self.config, self.version = runner.store.destination_config(export.id)
        self.location = location_of(self.config.provider, self.config.endpoint, self.config.bucket, self.config.prefix)
        self.destination: Destination = runner.open_destination(self.config, runner.policy)

    def guard(self) -> None:
        state = self.runner.store.state(self.export.id)
        if state.status != ACTIVE:
            raise RunInterrupted(self.export.id, state.status)
        if state.destination_version != self.version:
            raise _DestinationChanged

    def put(self, key: str, body: bytes) -> None:
        self.guard()
        self.destination.put(key, body)


class Runner:
    def __init__(
        self,
        store: ControlPlane,
        source: SourceReader,
        policy: OperatorPolicy,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        part_limit: int = PART_LIMIT,
        destination_factory: Callable[[DestinationConfig, OperatorPolicy], Destination] = open_destination,
        max_restarts: int = 5,
        count_retryable: bool = True,
    ) -> None:
        self.store = store
        self.source = source
        self.policy = policy
        self.clock = clock
        self.part_limit = part_limit
        self.open_destination = destination_factory
        self.max_restarts = max_restarts
        # False while Dagster's in-run RetryPolicy will try again: one failed run, not one failed
        # attempt, is one failure for the backoff.
        self.count_retryable = count_retryable

    def windows_for_day(
        self, export: ExportRecord, state: DatasetState, day: dt.date, *, rewrite: bool
    ) -> list[Window]:
        """The windows a run of (export, dataset, day) writes.

        Scheduled: the due windows of that day, continuing the chain. Rewrite (a backfill): the
        windows already committed on that day, with the same bounds, then the part of the day
        before the chain started on the frequency grid, then whatever is due.
        """
        start, end = day_start_ms(day), day_start_ms(day) + DAY_MS
        now = self.clock()
        due = [w for w in self.due_windows(export, state, now) if w.day == day]
        if not rewrite:
            return due
        committed = self.store.committed_windows(export.id, state.dataset, day.isoformat())
        before_chain: list[Window] = []
        chain_start = state.added_at
        if not committed and start < chain_start:
            horizon = min(end, chain_start, now - export.lag_ms)
            for w in grid_windows(day, export.frequency):
                if w.from_ms < horizon:
                    before_chain += chain(w.from_ms, min(w.to_ms, horizon))
        return sorted({*committed, *before_chain, *due})

    def due_windows(self, export: ExportRecord, state: DatasetState, now: int) -> list[Window]:
        """Due windows continuing the chain, starting with the exact bounds of an unfinished attempt.

        After a failure the backlog would otherwise merge the failed window with the following grid
        steps into one catch-up window under a new name, and the parts the failed attempt already
        wrote (same rows, old name) would stay in the bucket next to it: duplicates, and a retry that
        does not rewrite "the same window with the same file names".
        """
        pending = export.export_now_pending(state)
        horizon = now - export.lag_ms
        retry = self.unfinished_window(export.id, state)
        start = state.position_ms
        head: list[Window] = []
        if retry is not None and retry.to_ms <= horizon:
            head, start = [retry], retry.to_ms
        return head + due_windows(start, now, frequency=export.frequency, lag_ms=export.lag_ms, export_now=pending)

    def unfinished_window(self, export_id: str, state: DatasetState) -> Window | None:
        """The latest attempted, uncommitted window that starts at the position, if any."""
        attempts = [
            w
            for w in self.store.ledger(export_id, dataset=state.dataset, since_ms=state.position_ms)
            if w.window.from_ms == state.position_ms
        ]
        if not attempts or attempts[-1].status == COMMITTED:
            return None
        return attempts[-1].window

    def run_day(
        self,
        export_id: str,
        dataset: str,
        day: dt.date,
        *,
        run_id: str | None = None,
        rewrite: bool = False,
        on_window: Callable[[WindowReport], None] | None = None,
    ) -> DayReport:
        """Write what (export, dataset, day) needs now; raises `RunInterrupted` or an `ExportError`."""
        export = self.store.get_export(export_id)
        report = DayReport(export_id, dataset, day)
        if export.status != ACTIVE:
            raise RunInterrupted(export_id, export.status)
        state = export.dataset_state(dataset)
        if state is None:
            return report
        if DATASETS[dataset].is_snapshot:
            start = day_start_ms(day)
            due = self.clock() >= start + DAY_MS + export.lag_ms
            if due and (rewrite or state.position_ms == start):
                report.snapshot = self.write_snapshot(export_id, day, run_id=run_id)
            report.complete = report.snapshot is not None or (not rewrite and state.position_ms > start)
        else:
            for window in self.windows_for_day(export, state, day, rewrite=rewrite):
                result = self.write_window(export_id, dataset, window, run_id=run_id)
                report.windows.append(result)
                if on_window:
                    on_window(result)
            refreshed = self.store.get_export(export_id).dataset_state(dataset)
            position = refreshed.position_ms if refreshed else state.position_ms
            report.position_ms = position
            day_end = day_start_ms(day) + DAY_MS
            report.complete = position >= day_end or (day_end <= state.added_at and bool(report.windows))
        self._settle_export_now(export_id)
        return report

    def write_window(self, export_id: str, dataset: str, window: Window, *, run_id: str | None = None) -> WindowReport:
        def write(attempt: _Attempt, window_id: int, restarts: int) -> WindowReport:
            batches = self.source.window_batches(dataset, attempt.export.account_id, window)
            keys = (part_key(attempt.config.prefix, dataset, window, n) for n in _numbers())
            rows, count, size, blanked = self._write_parts(attempt, window_id, dataset, window, batches, keys)
            advanced = self.store.commit_window(window_id, rows=rows, part_count=count, size=size, now_ms=self.clock())
            return WindowReport(dataset, window, rows, count, size, blanked, advanced, restarts)

        return self._attempt(export_id, dataset, window, run_id, "window", write)

    def write_snapshot(self, export_id: str, day: dt.date, *, run_id: str | None = None) -> SnapshotReport:
        window = snapshot_window(day_start_ms(day))

        def write(attempt: _Attempt, window_id: int, restarts: int) -> SnapshotReport:
            taken_at = self.clock()
            batches = self.source.snapshot_batches(attempt.export.account_id)
            keys = (snapshot_part_key(attempt.config.prefix, day, n) for n in _numbers())
            rows, count, size, blanked = self._write_parts(attempt, window_id, "subscribers", window, batches, keys)
            # _SUCCESS strictly after every part (and every blanked stale part).
            attempt.put(success_key(attempt.config.prefix, day), b"")
            self.store.commit_window(
                window_id, rows=rows, part_count=count, size=size, now_ms=self.clock(), snapshot_taken_at=taken_at
            )
            return SnapshotReport(day, rows, count, size, blanked, taken_at, restarts)

        return self._attempt(export_id, "subscribers", window, run_id, "snapshot", write)

    def _attempt(
        self,
        export_id: str,
        dataset: str,
        window: Window,
        run_id: str | None,
        what: str,
        write: Callable[[_Attempt, int, int], _Report],
    ) -> _Report:
        """Run ``write`` as one ledger attempt; start over at the new place if the destination moves."""
        for restarts in range(self.max_restarts + 1):
            export = self.store.get_export(export_id)
            if export.status != ACTIVE:
                raise RunInterrupted(export_id, export.status)
            attempt = _Attempt(self, export)
            window_id = self.store.start_window(
                export_id, dataset, window, run_id=run_id, location=attempt.location, now_ms=self.clock()
            )
            try:
                return write(attempt, window_id, restarts)
            except _DestinationChanged:
                self._abandon(window_id, f"destination changed during the {what}; started over at the new destination")
            except BaseException as exc:
                self._fail(window_id, exc)
                raise
            finally:
                attempt.destination.close()
        raise ExportError(
            f"destination of export {export_id} kept changing; gave up after {self.max_restarts} restarts"
        )

    def _write_parts(
        self,
        attempt: _Attempt,
        window_id: int,
        dataset: str,
        window: Window,
        batches: Iterator[list[tuple[object, ...]]],
        keys: Iterator[str],
    ) -> tuple[int, int, int, int]:
        writer = PartWriter(DATASETS[dataset], self.part_limit)
        rows = count = size = 0
        part: Part
        # Each part is recorded before its PUT, not after: a worker killed (or a control plane lost)
        # between a PUT that landed and its record would leave a part no later attempt knows to
        # blank. Recording one that then fails costs at most one needless empty part.
        written = self.store.parts_written(attempt.export.id, dataset, window, attempt.location)
        try:
            for part, key in zip(writer.parts(batches), keys, strict=False):
                self.store.record_part(
                    window_id, part=part.number, key=key, rows=part.rows, size=part.size, now_ms=self.clock()
                )
                attempt.put(key, part.body)
                rows, count, size = rows + part.rows, count + 1, size + part.size
        finally:
            # Release the source connection (on PostgreSQL an open transaction with a server-side
            # cursor) now, not whenever the failure's traceback is collected.
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        blanked = 0
        for number in range(count, written):
            key = next(keys)
            self.store.record_part(window_id, part=number, key=key, rows=0, size=len(EMPTY_GZIP), now_ms=self.clock())
            attempt.put(key, EMPTY_GZIP)
            blanked += 1
        return rows, count, size, blanked

    def _abandon(self, window_id: int, why: str) -> None:
        self.store.fail_window(window_id, error=why, now_ms=self.clock(), canceled=True)

    def _fail(self, window_id: int, exc: BaseException) -> None:
        if isinstance(exc, RunInterrupted):
            self.store.fail_window(window_id, error=str(exc), now_ms=self.clock(), canceled=True)
        elif isinstance(exc, ExportError):
            counted = self.count_retryable or not exc.retryable
            self.store.fail_window(window_id, error=str(exc), now_ms=self.clock(), count_failure=counted)
        elif isinstance(exc, Exception):
            # Not ours: keep the type and place, never the arguments (they could hold data).
            where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
            self.store.fail_window(window_id, error=f"internal error {type(exc).__name__}{at}", now_ms=self.clock())
        else:  # KeyboardInterrupt, SystemExit, a terminated run: not the customer's failure
            self.store.fail_window(window_id, error="run terminated", now_ms=self.clock(), canceled=True)

    def _settle_export_now(self, export_id: str) -> None:
        export = self.store.get_export(export_id)
        if export.export_now_at is not None and not any(export.export_now_pending(s) for s in export.datasets):
            self.store.clear_export_now(export_id, export.export_now_at)


def _numbers() -> Iterator[int]:
    n = 0
    while True:
        yield n
        n += 1
