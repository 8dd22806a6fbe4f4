"""The window runner and the snapshot runner: the only code that writes into a customer's bucket.

Delivery is write-once: no object is ever replaced (GCS "Storage Object Creator", S3 Object Lock and
create-only bucket policies refuse it, and Snowpipe never reloads a name it has loaded). Order of
operations for one window, and why:
1. Re-read the export before every file. Paused or deleted: stop before the file, leave the window
   uncommitted (`RunInterrupted`). Destination changed: start the window over at the new place.
2. Record each part's intent in the part ledger (number, key, boundary = sort key of its last row,
   rows, bytes, MD5, ids) *before* its PUT, and mark it landed after a 2xx. A worker killed between
   the two leaves an intent whose outcome is unknown; nothing is ever sent without a record.
3. A retry finishes what an earlier attempt left: landed parts are skipped; a part whose outcome is
   unknown is sent again, with the same rows under the same name, create-only, so a 412 (or, on a
   store without preconditions, a 403 that a fresh probe write shows is not a revoked key) means it
   had landed; new parts continue after the last boundary, numbered on. Part numbers never shrink,
   so nothing needs blanking.
4. Rows that appeared inside ranges already delivered (late rows) are found by id against the
   ledger and sent as additional parts, numbered on (`deliver_late`; reconciliation calls it).
5. Commit: ledger row and position in one transaction. Nothing before this point is visible as
   progress, so a crash anywhere above is repaired by the next attempt resuming from the ledger.

Only an operator's explicit replace (``replace=True``) overwrites: it rewrites a window from part
0000 and fills part numbers it no longer needs with empty gzip. It needs a key that may overwrite.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, TypeVar

from seqexport_dagster import planner
from seqexport_dagster.destination.base import (
    Destination,
    DestinationConfig,
    OperatorPolicy,
    PutOutcome,
    open_destination,
)
from seqexport_dagster.errors import AccessDenied, ExportError, PermanentError, RunInterrupted
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.source.reader import Row, SourceReader
from seqexport_dagster.store import (
    ACTIVE,
    COMMITTED,
    LATE_PART,
    LEGACY_PART,
    RANGE_PART,
    SUCCESS_MARK,
    ControlPlane,
    DatasetState,
    ExportRecord,
    PartRecord,
    location_of,
    snapshot_window,
)
from seqexport_dagster.window import (
    DAY_MS,
    PART_LIMIT,
    SNAPSHOT_DATASET,
    Window,
    connection_test_key,
    day_start,
    day_start_ms,
    part_key,
    snapshot_part_key,
    success_key,
)
from seqexport_dagster.writer import EMPTY_GZIP, Part, PartWriter, SortKey, pack_ids, unpack_ids

_Report = TypeVar("_Report", "WindowReport", "SnapshotReport")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Sent:
    """What one attempt uploaded, beside the window's totals (a resumed attempt sends less)."""

    parts: int = 0
    rows: int = 0
    bytes: int = 0
    skipped: int = 0  # landed parts of earlier attempts, left as they are
    resent: int = 0  # parts of unknown outcome sent again
    existed: int = 0  # of those, the store said (412, or a probed 403) an earlier send had landed
    late_rows: int = 0  # rows appended as additional parts because they appeared late


@dataclass(frozen=True, slots=True)
class WindowReport:
    """A window's totals at its location after the attempt (every landed part), and what it sent."""

    dataset: str
    window: Window
    rows: int
    parts: int
    bytes: int
    advanced: bool
    restarts: int = 0
    sent: Sent = field(default_factory=Sent)


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    day: dt.date
    rows: int
    parts: int
    bytes: int
    snapshot_taken_at: int
    restarts: int = 0
    sent: Sent = field(default_factory=Sent)


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
    skipped_windows: int = 0  # backfill: windows already whole in the bucket

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
        if self.location != export.location:  # moved between reading the export and its secret
            raise _DestinationChanged
        self.destination: Destination = runner.open_destination(self.config, runner.policy)

    def guard(self) -> None:
        if self.runner.before_file is not None:  # issue 14: renews the writer lease
            self.runner.before_file(self.export.id)
        state = self.runner.store.state(self.export.id)
        if state.status != ACTIVE:
            raise RunInterrupted(self.export.id, state.status)
        if state.destination_version != self.version:
            raise _DestinationChanged

    def create(self, key: str, body: bytes, *, outcome_unknown: bool = False) -> PutOutcome:
        """Create ``key`` (never replace it). ``outcome_unknown``: an earlier send may have landed it.

        Without a precondition a key that may not overwrite answers 403 to a re-send of an object
        that is there. That 403 is believed to mean "revoked" only if a fresh probe write under
        ``<prefix>/_sequenzy/`` fails too; otherwise the object had landed.
        """
        self.guard()
        try:
            return self.destination.put(key, body, create_only=True)
        except AccessDenied as exc:
            if not (outcome_unknown or exc.outcome_unknown):
                raise
            try:
                self.destination.put(connection_test_key(self.config.prefix, f"probe-{secrets.token_hex(8)}"), _PROBE)
            except AccessDenied:
                raise exc from None  # the key may not create anything: truly denied
            return PutOutcome.EXISTED

    def overwrite(self, key: str, body: bytes) -> None:
        """An operator's replace: the one write that may overwrite."""
        self.guard()
        try:
            self.destination.put(key, body, create_only=False)
        except AccessDenied as exc:
            raise AccessDenied(
                f"{exc.message}. Replacing files needs a key that may overwrite; this one may only create "
                "(GCS Storage Object Creator, S3 Object Lock or a create-only bucket policy). "
                "Run the backfill without replace: it delivers what is missing and never overwrites"
            ) from None


#: The snapshot's _SUCCESS in the part ledger: a number no part can have.
SUCCESS_NUMBER: Final = -1
EMPTY_MD5: Final = "1B2M2Y8AsgTpgAmY7PhCfg=="  # base64 MD5 of b""
_PROBE: Final = b"Sequenzy Data Exports write probe: checks that this key may still create objects. Safe to delete.\n"


@dataclass(slots=True)
class _Tally:
    rows: int = 0
    parts: int = 0
    bytes: int = 0
    sent_parts: int = 0
    sent_rows: int = 0
    sent_bytes: int = 0
    skipped: int = 0
    resent: int = 0
    existed: int = 0
    late_rows: int = 0
    next_number: int = 0

    def landed(self, rows: int, size: int) -> None:
        self.rows, self.parts, self.bytes = self.rows + rows, self.parts + 1, self.bytes + size

    def uploaded(self, part: Part) -> None:
        self.sent_parts, self.sent_rows, self.sent_bytes = (
            self.sent_parts + 1,
            self.sent_rows + part.rows,
            self.sent_bytes + part.size,
        )

    def sent(self) -> Sent:
        return Sent(
            self.sent_parts,
            self.sent_rows,
            self.sent_bytes,
            self.skipped,
            self.resent,
            self.existed,
            self.late_rows,
        )


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
        before_file: Callable[[str], None] | None = None,
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
        #: Called before every file with the export id; raises to stop (a lost writer lease).
        self.before_file = before_file

    def windows_for_day(
        self, export: ExportRecord, state: DatasetState, day: dt.date, *, rewrite: bool
    ) -> list[Window]:
        """The windows a run of (export, dataset, day) looks at: `planner.day_windows` decides.

        Scheduled: the due windows of that day, continuing the chain. Backfill (``rewrite``): also
        the windows already committed on that day, with the same bounds, so that whatever of them
        is missing in the bucket is delivered. Never anything before the dataset was added.
        """
        unfinished = self.unfinished_window(export.id, state)
        committed = self.store.committed_windows(export.id, state.dataset, day.isoformat()) if rewrite else []
        return planner.day_windows(export, state, day, self.clock(), unfinished=unfinished, committed=committed)

    def due_windows(self, export: ExportRecord, state: DatasetState, now: int) -> list[Window]:
        """Due windows continuing the chain, starting with the exact bounds of an unfinished attempt
        (`planner.windows_due`): resuming the same window continues its parts instead of landing
        its rows again under a new name.
        """
        return planner.windows_due(export, state, now, self.unfinished_window(export.id, state))

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
        replace: bool = False,
        on_window: Callable[[WindowReport], None] | None = None,
    ) -> DayReport:
        """Write what (export, dataset, day) needs now; raises `RunInterrupted` or an `ExportError`.

        ``rewrite`` (a backfill) also visits the day's committed windows and delivers what is missing
        of them, create-only; ``replace`` (an operator's explicit choice) rewrites them instead.
        """
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
            backfill = (rewrite or replace) and day_start(state.added_at) <= start
            if due and state.position_ms == start:
                report.snapshot = self.write_snapshot(export_id, day, run_id=run_id)
            elif due and backfill and start < state.position_ms:
                if replace or not self.store.committed_at(export_id, dataset, snapshot_window(start), export.location):
                    report.snapshot = self.write_snapshot(export_id, day, run_id=run_id, replace=replace)
                else:
                    report.skipped_windows = 1
            report.complete = report.snapshot is not None or state.position_ms > start
        else:
            for window in self.windows_for_day(export, state, day, rewrite=rewrite or replace):
                behind = window.to_ms <= state.position_ms
                if behind and not replace and not self.needs_delivery(export, dataset, window):
                    report.skipped_windows += 1
                    continue
                result = self.write_window(export_id, dataset, window, run_id=run_id, replace=replace and behind)
                report.windows.append(result)
                if on_window:
                    on_window(result)
            refreshed = self.store.get_export(export_id).dataset_state(dataset)
            position = refreshed.position_ms if refreshed else state.position_ms
            report.position_ms = position
            report.complete = position >= day_start_ms(day) + DAY_MS
        self._settle_export_now(export_id)
        return report

    def needs_delivery(self, export: ExportRecord, dataset: str, window: Window) -> bool:
        """Whether a window behind the position lacks anything in the bucket: a part of unknown
        outcome, or rows that appeared in it after it was delivered."""
        location = export.location
        ledger = self.store.window_parts(export.id, dataset, window, location)
        if not ledger:
            return True
        if any(not p.landed for p in ledger):
            return True
        return bool(self.late_ids(export, dataset, window, ledger))

    def late_ids(self, export: ExportRecord, dataset: str, window: Window, ledger: list[PartRecord]) -> set[str]:
        """Ids in the source that no part of the window carries. Empty when the ledger no longer
        holds the window's ids (legacy parts, or pruned after the reconciliation lookback)."""
        if not ledger or any(p.ids is None for p in ledger):
            return set()
        delivered: set[str] = set()
        for p in ledger:
            delivered.update(unpack_ids(p.ids or b""))
        scope = None if dataset == SNAPSHOT_DATASET else window
        missing: set[str] = set()
        for batch in self.source.ids(dataset, export.account_id, scope):
            missing.update(i for i in batch if i not in delivered)
        return missing

    def write_window(
        self,
        export_id: str,
        dataset: str,
        window: Window,
        *,
        run_id: str | None = None,
        replace: bool = False,
    ) -> WindowReport:
        def write(attempt: _Attempt, window_id: int, restarts: int) -> WindowReport:
            def keys(n: int) -> str:
                return part_key(attempt.config.prefix, dataset, window, n)

            committed = self.store.committed_at(export_id, dataset, window, attempt.location)
            tally = self._deliver(attempt, window_id, dataset, window, keys, replace=replace, committed=committed)
            advanced = self.store.commit_window(
                window_id, rows=tally.rows, part_count=tally.parts, size=tally.bytes, now_ms=self.clock()
            )
            return WindowReport(dataset, window, tally.rows, tally.parts, tally.bytes, advanced, restarts, tally.sent())

        return self._attempt(export_id, dataset, window, run_id, "window", write)

    def write_snapshot(
        self, export_id: str, day: dt.date, *, run_id: str | None = None, replace: bool = False
    ) -> SnapshotReport:
        window = snapshot_window(day_start_ms(day))

        def write(attempt: _Attempt, window_id: int, restarts: int) -> SnapshotReport:
            taken_at = self.clock()

            def keys(n: int) -> str:
                return snapshot_part_key(attempt.config.prefix, day, n)

            success = success_key(attempt.config.prefix, day)
            ledger = self.store.window_parts(export_id, SNAPSHOT_DATASET, window, attempt.location)
            if not replace and any(p.kind == SUCCESS_MARK for p in ledger):
                # An earlier attempt sent _SUCCESS (then failed to commit): the day is whole as it
                # is. Appending a part now would put it after the marker.
                tally = _Tally()
                for p in ledger:
                    if p.kind != SUCCESS_MARK:
                        tally.skipped += 1
                        tally.landed(p.rows, p.size)
            else:
                tally = self._deliver(
                    attempt, window_id, SNAPSHOT_DATASET, window, keys, replace=replace, committed=False
                )
            # _SUCCESS strictly after every part, itself recorded before its PUT like a part.
            self.store.record_part_intent(
                window_id,
                number=SUCCESS_NUMBER,
                key=success,
                kind=SUCCESS_MARK,
                last=None,
                rows=0,
                size=0,
                md5=EMPTY_MD5,
                ids=pack_ids(()),
                now_ms=self.clock(),
            )
            if replace:
                attempt.overwrite(success, b"")
            else:
                attempt.create(success, b"", outcome_unknown=True)
            self.store.mark_part_landed(window_id, SUCCESS_NUMBER, self.clock())
            self.store.commit_window(
                window_id,
                rows=tally.rows,
                part_count=tally.parts,
                size=tally.bytes,
                now_ms=self.clock(),
                snapshot_taken_at=taken_at,
            )
            return SnapshotReport(day, tally.rows, tally.parts, tally.bytes, taken_at, restarts, tally.sent())

        return self._attempt(export_id, SNAPSHOT_DATASET, window, run_id, "snapshot", write)

    def _attempt(
        self,
        export_id: str,
        dataset: str,
        window: Window,
        run_id: str | None,
        what: str,
        write: Callable[[_Attempt, int, int], _Report],
    ) -> _Report:
        """Run ``write`` as one ledger attempt; start over at the new place if the destination moves.

        The attempt is in the ledger before the destination is opened: a secret that no longer
        opens, or a stored endpoint that no longer passes validation, fails that attempt where the
        customer sees it (status, history) and counts for the backoff like any other failure.
        """
        for restarts in range(self.max_restarts + 1):
            export = self.store.get_export(export_id)
            if export.status != ACTIVE:
                raise RunInterrupted(export_id, export.status)
            window_id = self.store.start_window(
                export_id, dataset, window, run_id=run_id, location=export.location, now_ms=self.clock()
            )
            attempt: _Attempt | None = None
            try:
                attempt = _Attempt(self, export)
                return write(attempt, window_id, restarts)
            except _DestinationChanged:
                self._abandon(window_id, f"destination changed during the {what}; started over at the new destination")
            except BaseException as exc:
                self._fail(window_id, exc)
                raise
            finally:
                if attempt is not None:
                    attempt.destination.close()
        raise ExportError(
            f"destination of export {export_id} kept changing; gave up after {self.max_restarts} restarts"
        )

    def _deliver(
        self,
        attempt: _Attempt,
        window_id: int,
        dataset: str,
        window: Window,
        keys: Callable[[int], str],
        *,
        replace: bool,
        committed: bool,
    ) -> _Tally:
        """Bring the window's parts at the attempt's location up to the source, write-once.

        1. parts of unknown outcome are sent again with the rows they were recorded with;
        2. an uncommitted window continues after the last landed boundary;
        3. a window that was resumed or committed gets its late rows as additional parts.
        """
        account = attempt.export.account_id
        snapshot = dataset == SNAPSHOT_DATASET
        ledger = [
            p
            for p in self.store.window_parts(attempt.export.id, dataset, window, attempt.location)
            if p.kind != SUCCESS_MARK
        ]
        if replace or any(p.kind == LEGACY_PART for p in ledger):
            # An operator's replace, or a window the runner before the part ledger left unfinished
            # (no boundaries to resume from): rewrite from part 0000. Needs overwrite rights.
            return self._replace(attempt, window_id, dataset, window, keys, ledger)
        tally = _Tally()
        writer = PartWriter(DATASETS[dataset], self.part_limit)
        boundary: SortKey | None = None
        for p in ledger:
            tally.next_number = p.number + 1
            if p.landed:
                tally.skipped += 1
                tally.landed(p.rows, p.size)
            else:
                lo, hi = (boundary, p.last) if p.kind == RANGE_PART else (None, None)
                rows = self._rows(dataset, account, window, lo, hi, wanted=set(unpack_ids(p.ids or b"")))
                part = _one_part(writer, rows, p.number)
                outcome = attempt.create(p.key, part.body, outcome_unknown=True)
                tally.resent += 1
                tally.existed += outcome == PutOutcome.EXISTED
                self.store.mark_part_landed(window_id, p.number, self.clock())
                tally.landed(p.rows, p.size)
                if outcome == PutOutcome.CREATED:
                    tally.uploaded(part)
            if p.kind == RANGE_PART and p.last is not None:
                boundary = p.last
        if not committed:
            if snapshot:
                batches = self.source.snapshot_batches(account, after=boundary)
            else:
                batches = self.source.window_batches(dataset, account, window, after=boundary)
            self._send(attempt, window_id, writer, batches, keys, tally, kind=RANGE_PART, empty=not ledger)
        if ledger or committed:
            late = self.late_ids(
                attempt.export,
                dataset,
                window,
                self.store.window_parts(attempt.export.id, dataset, window, attempt.location),
            )
            if late:
                rows = self._rows(dataset, account, window, None, None, wanted=late)
                before = tally.rows
                self._send(attempt, window_id, writer, rows, keys, tally, kind=LATE_PART, empty=False)
                tally.late_rows = tally.rows - before
        return tally

    def _rows(
        self,
        dataset: str,
        account: str,
        window: Window,
        after: SortKey | None,
        until: SortKey | None,
        *,
        wanted: set[str],
    ) -> Iterator[list[Row]]:
        """Rows of a range (or the whole window) whose id is in ``wanted``, in the parts' order."""
        if not wanted:  # an empty part: nothing to read
            return
        if dataset == SNAPSHOT_DATASET:
            batches = self.source.snapshot_batches(account, after=after, until=until)
        else:
            batches = self.source.window_batches(dataset, account, window, after=after, until=until)
        try:
            for batch in batches:
                kept = [row for row in batch if row[0] in wanted]
                if kept:
                    yield kept
        finally:
            _close(batches)

    def _send(
        self,
        attempt: _Attempt,
        window_id: int,
        writer: PartWriter,
        batches: Iterator[list[Row]],
        keys: Callable[[int], str],
        tally: _Tally,
        *,
        kind: str,
        empty: bool,
    ) -> None:
        part: Part
        try:
            for part in writer.parts(batches, first=tally.next_number, empty=empty):
                key = keys(part.number)
                self._record_intent(window_id, key, part, kind)
                try:
                    outcome = attempt.create(key, part.body)
                except PermanentError as exc:
                    # A definite refusal (403, 404, a bad signature...) created nothing: the next
                    # attempt may cut this part afresh. Transport failures keep the intent (unknown).
                    if not (isinstance(exc, AccessDenied) and exc.outcome_unknown):
                        self.store.forget_part_intent(window_id, part.number)
                    raise
                self.store.mark_part_landed(window_id, part.number, self.clock())
                tally.next_number = part.number + 1
                tally.landed(part.rows, part.size)
                if outcome == PutOutcome.CREATED:
                    tally.uploaded(part)
                else:
                    tally.existed += 1
        finally:
            # Release the source connection (on PostgreSQL an open transaction with a server-side
            # cursor) now, not whenever the failure's traceback is collected.
            _close(batches)

    def _replace(
        self,
        attempt: _Attempt,
        window_id: int,
        dataset: str,
        window: Window,
        keys: Callable[[int], str],
        ledger: list[PartRecord],
    ) -> _Tally:
        account = attempt.export.account_id
        if dataset == SNAPSHOT_DATASET:
            batches = self.source.snapshot_batches(account)
        else:
            batches = self.source.window_batches(dataset, account, window)
        tally = _Tally()
        writer = PartWriter(DATASETS[dataset], self.part_limit)
        try:
            for part in writer.parts(batches):
                self._overwrite(attempt, window_id, keys(part.number), part, tally)
        finally:
            _close(batches)
        written = max((p.number + 1 for p in ledger if p.kind != SUCCESS_MARK), default=0)
        for number in range(tally.parts, written):
            blank = Part(number, EMPTY_GZIP, 0)
            self._overwrite(attempt, window_id, keys(number), blank, tally)
        return tally

    def _overwrite(self, attempt: _Attempt, window_id: int, key: str, part: Part, tally: _Tally) -> None:
        self._record_intent(window_id, key, part, RANGE_PART)
        attempt.overwrite(key, part.body)
        self.store.mark_part_landed(window_id, part.number, self.clock())
        tally.landed(part.rows, part.size)
        tally.uploaded(part)

    def _record_intent(self, window_id: int, key: str, part: Part, kind: str) -> None:
        """The part ledger's record of ``part`` under ``key``, always before its PUT."""
        self.store.record_part_intent(
            window_id,
            number=part.number,
            key=key,
            kind=kind,
            last=part.last,
            rows=part.rows,
            size=part.size,
            md5=part.content_md5,
            ids=pack_ids(part.ids),
            now_ms=self.clock(),
        )

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


def _one_part(writer: PartWriter, rows: Iterator[list[Row]], number: int) -> Part:
    """The rows of one recorded part, re-cut; never more than the part limit (they were one part)."""
    parts = list(writer.parts(rows, first=number))
    return parts[0]


def _close(batches: Iterator[object]) -> None:
    close = getattr(batches, "close", None)
    if close is not None:
        close()
