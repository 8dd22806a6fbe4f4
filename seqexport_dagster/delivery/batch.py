"""Batched delivery: many exports in one run, concurrently, each under its writer lease and deadline.

One run carries up to K exports of one day (`planner.batch`). Inside it:
1. Exports run on a bounded pool of worker threads (``workers``). The run's own thread only
   watches: it relays each landed window to the caller (`on_window`, called on the run's thread,
   so Dagster's context is never touched from a worker) and enforces deadlines.
2. Before anything, an export's writer lease is claimed (`store.lease.Leases`). Held elsewhere
   (another run, a UI launch, a backfill): the export is skipped as ``busy``; its own writer
   finishes the work. The lease is renewed before every file, so a killed worker's lease lapses;
   a holder known to be dead (``holder_ended``: its run ended) is taken over at once.
3. Each dataset of the export runs `Runner.run_day`. A transient error (`RetryableError`) is retried
   after short delays (seconds); the last attempt counts for the backoff. Any other error is
   recorded by the runner as the dataset's last error (backoff) and the export moves on to its next
   dataset: a failing dataset never blocks the others, a failing export never the other exports.
4. An export still running at its deadline is given up: its failure is recorded for the backoff,
   its lease is revoked (its thread stops before its next file), and a fresh worker thread takes
   its slot so the exports queued behind it start on time. Worker threads are daemons: a hung PUT
   cannot hold the run process open once the run is over.
5. With a ``trigger`` (Dagster runs), every (export, dataset) the run takes on is written to the
   run log (`store.run_log`) when it starts and when it ends: succeeded, failed (with the customer
   message and "retries at <time> (attempt n)") or canceled (paused or deleted, even before the
   first file). `seqexport history` reads it; `run_verdict` gives the run's own end state.

Size: over 400 lines on purpose. The workers, the watching thread, deadlines and revocation share one
concurrency protocol (the lock, the revoked set, the event queue); split, it would be read in halves.
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import day_start_ms
from seqexport_dagster.delivery import planner
from seqexport_dagster.delivery.idle import retry_note
from seqexport_dagster.delivery.runner import DayReport, Runner, WindowReport
from seqexport_dagster.errors import ExportError, LeaseLost, NotFound, RunInterrupted
from seqexport_dagster.store import ACTIVE, ControlPlane, run_log, snapshot_window
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.run_log import RunLog, RunNotes

DONE, FAILED, BUSY, INACTIVE, INTERRUPTED, TIMED_OUT = "done", "failed", "busy", "inactive", "interrupted", "timed out"
#: Waits before the 2nd and 3rd attempt of a dataset after a transient error (throttling, resets, 5xx).
RETRY_DELAYS_S: Final = (2.0, 4.0)
DEFAULT_WORKERS: Final = 8
DEFAULT_DEADLINE_S: Final = 900.0


class RunnerFactory(Protocol):
    def __call__(self, *, count_retryable: bool, before_file: Callable[[str], None]) -> Runner: ...


@dataclass(slots=True)
class ExportOutcome:
    export_id: str
    status: str = DONE
    reports: list[DayReport] = field(default_factory=list)
    #: (dataset, customer-readable message) of each dataset that failed in this run.
    errors: list[tuple[str, str]] = field(default_factory=list)
    #: When each failed dataset is tried again: "retries at <time> (attempt n)", or "paused".
    retries: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.reports)

    @property
    def files(self) -> int:
        return sum(r.files for r in self.reports)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.reports)


@dataclass(slots=True)
class BatchReport:
    outcomes: dict[str, ExportOutcome] = field(default_factory=dict)
    #: Per export, why part of the request was not delivered (`delivery.backfill`: days before its start).
    notes: dict[str, list[str]] = field(default_factory=dict)

    def with_status(self, status: str) -> list[ExportOutcome]:
        return [o for o in self.outcomes.values() if o.status == status]

    @property
    def rows(self) -> int:
        return sum(o.rows for o in self.outcomes.values())

    @property
    def files(self) -> int:
        return sum(o.files for o in self.outcomes.values())

    @property
    def bytes(self) -> int:
        return sum(o.bytes for o in self.outcomes.values())

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for o in self.outcomes.values():
            counts[o.status] = counts.get(o.status, 0) + 1
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return f"{len(self.outcomes)} export(s): {parts}; {self.rows} rows, {self.files} files, {self.bytes} bytes"


def run_verdict(report: BatchReport) -> str:
    """How the run itself ends, in Dagster's words (`store.run_log`'s end states).

    - succeeded: some export delivered its work, or there was nothing to do (every export busy
      elsewhere). The exports that failed beside it are reported per export, never as the run's
      failure: one export's failure must not make its neighbours' delivery look failed;
    - failed: exports failed and none delivered (a run of one failing export, such as an
      "export now", is exactly that export's outcome);
    - canceled: every export taken on was paused or deleted (before or during its work).
    """
    statuses = {o.status for o in report.outcomes.values()}
    if DONE in statuses:
        return run_log.SUCCEEDED
    if statuses & {FAILED, TIMED_OUT}:
        return run_log.FAILED
    if statuses & {INACTIVE, INTERRUPTED}:
        return run_log.CANCELED
    return run_log.SUCCEEDED


class BatchRunner:
    def __init__(
        self,
        make_runner: RunnerFactory,
        store: ControlPlane,
        leases: Leases,
        *,
        holder: str,
        clock: Callable[[], int],
        workers: int = DEFAULT_WORKERS,
        deadline_s: float = DEFAULT_DEADLINE_S,
        retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], None] = time.sleep,
        holder_ended: Callable[[str], bool] | None = None,
    ) -> None:
        self.make_runner = make_runner
        self.store = store
        self.leases = leases
        self.holder = holder
        self.clock = clock
        self.workers = max(1, workers)
        self.deadline_s = deadline_s
        self.retry_delays_s = tuple(retry_delays_s)
        self.sleep = sleep
        #: Whether a lease holder is known to be dead (its run ended); its leases are taken over.
        self.holder_ended = holder_ended
        self._revoked: set[str] = set()
        self._lock = threading.Lock()
        self._notes: RunNotes | None = None

    def run(
        self,
        export_ids: Iterable[str],
        days: Sequence[dt.date],
        datasets: Iterable[str],
        *,
        run_id: str | None,
        rewrite: bool,
        replace: bool = False,
        redeliver: bool = False,
        on_window: Callable[[str, WindowReport], None] | None = None,
        after_export: Callable[[Runner, str], Iterable[object]] | None = None,
        on_note: Callable[[object], None] | None = None,
        trigger: Callable[[str], str] | None = None,
    ) -> BatchReport:
        """Deliver ``days`` × ``datasets`` for each export; returns once each is done or past its deadline.

        ``after_export`` runs in the export's worker, still under its lease, once its datasets all
        succeeded (the scheduled runs' reconciliation); what it returns goes to ``on_note`` on the
        caller's thread, like ``on_window``. ``trigger`` (export id → `store.run_log` trigger) turns
        on the run log for ``run_id``.
        """
        self._notes = None
        if trigger is not None and run_id is not None:
            self._notes = RunNotes(RunLog(self.store.engine), run_id, trigger, self.clock)
        ids = list(dict.fromkeys(export_ids))
        wanted = tuple(datasets)
        jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
        for export_id in ids:
            jobs.put(export_id)
        events: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        started: dict[str, float] = {}
        current: dict[str, str] = {}

        def work() -> None:
            while True:
                try:
                    export_id = jobs.get_nowait()
                except queue.Empty:
                    return
                with self._lock:
                    started[export_id] = time.monotonic()
                outcome = self._export(
                    export_id, days, wanted, run_id, (rewrite, replace, redeliver), events, current, after_export
                )
                events.put(("done", outcome))

        def spawn() -> None:
            threading.Thread(target=work, name="seqexport-batch", daemon=True).start()

        for _ in range(min(self.workers, len(ids))):
            spawn()
        try:
            return self._watch(ids, events, started, current, spawn, on_window, on_note)
        except BaseException:
            # The run is being stopped (Dagster's terminate interrupts this thread): every export's
            # worker stops before its next file, and writes nothing more to the run log.
            with self._lock:
                self._revoked |= set(ids)
            raise

    def _watch(
        self,
        ids: list[str],
        events: queue.SimpleQueue[tuple[str, object]],
        started: dict[str, float],
        current: dict[str, str],
        spawn: Callable[[], None],
        on_window: Callable[[str, WindowReport], None] | None,
        on_note: Callable[[object], None] | None,
    ) -> BatchReport:
        """The run's own thread: relays windows and notes, collects outcomes, enforces deadlines."""
        report = BatchReport()
        pending = set(ids)
        while pending:
            try:
                kind, payload = events.get(timeout=0.2)
            except queue.Empty:
                kind, payload = "", None
            if kind == "window" and on_window is not None:
                export_id, window_report = payload  # type: ignore[misc]
                on_window(export_id, window_report)
            elif kind == "note" and on_note is not None:
                on_note(payload)
            elif kind == "done":
                assert isinstance(payload, ExportOutcome)
                if payload.export_id in pending:
                    pending.discard(payload.export_id)
                    report.outcomes[payload.export_id] = payload
            now = time.monotonic()
            with self._lock:
                late = [e for e in pending if e in started and now - started[e] > self.deadline_s]
            for export_id in late:
                pending.discard(export_id)
                report.outcomes[export_id] = self._give_up(export_id, current.get(export_id), now - started[export_id])
                spawn()
        # Windows relayed after the last "done" of their export are still delivered to the caller.
        while True:
            try:
                kind, payload = events.get_nowait()
            except queue.Empty:
                break
            if kind == "window" and on_window is not None:
                export_id, window_report = payload  # type: ignore[misc]
                on_window(export_id, window_report)
            elif kind == "note" and on_note is not None:
                on_note(payload)
        return report

    def _renew(self, export_id: str) -> None:
        with self._lock:
            revoked = export_id in self._revoked
        if revoked or not self.leases.renew(export_id, self.holder, self.clock()):
            raise LeaseLost(export_id)

    def _give_up(self, export_id: str, dataset: str | None, seconds: float) -> ExportOutcome:
        with self._lock:
            self._revoked.add(export_id)
        message = (
            f"did not finish within {self.deadline_s:.0f} s (the destination stopped answering); "
            "it will be retried after the backoff"
        )
        outcome = ExportOutcome(export_id, TIMED_OUT, errors=[(dataset or "-", message)], seconds=seconds)
        if dataset is not None:
            self.store.record_failure(export_id, dataset, None, message, self.clock())
            outcome.retries[dataset] = self._retry_note(export_id, dataset)
            if self._notes is not None:
                self._notes.finish(export_id, dataset, run_log.FAILED, f"{message} ({outcome.retries[dataset]})")
        return outcome

    def _retry_note(self, export_id: str, dataset: str, message: str = "", past_day: dt.date | None = None) -> str:
        """When a failed dataset is tried again, read back from the control plane after the failure.

        ``past_day``: a backfill or replace of that day failed. A snapshot day behind the position
        is owed to its retry only while the dataset's last error names it (`planner.owed_snapshot_day`),
        and the runner counts only the last try's failure, which may have failed in the control plane
        before its attempt was in the ledger (long run #11 seed 30001097: the day's part landed at a
        new place, its ``_SUCCESS`` met a 503 on a try that does not count, the last try a database
        outage; nothing named the day, which stayed without ``_SUCCESS`` there). The day is named
        here, from the state this note reads anyway. Best effort: a control plane still away
        leaves it as before."""
        try:
            export = self.store.get_export(export_id)
        except ExportError:
            return "retries at the next tick"
        state = export.dataset_state(dataset)
        if export.status != ACTIVE or state is None:
            return export.status
        if past_day is not None and DATASETS[dataset].is_snapshot:
            window = snapshot_window(day_start_ms(past_day))
            if window.to_ms <= state.position_ms and state.last_error_window != window:
                try:
                    state = self.store.record_failure(export_id, dataset, window, message, self.clock()) or state
                except ExportError:
                    pass
        return retry_note(state)

    def _finish(self, export_id: str, dataset: str, status: str, message: str | None = None) -> None:
        """The run log's end of one dataset, unless the export was given up at its deadline (that
        entry is written by `_give_up`; the abandoned thread's later outcome is not this run's)."""
        with self._lock:
            revoked = export_id in self._revoked
        if self._notes is not None and not revoked:
            self._notes.finish(export_id, dataset, status, message)

    def _export(
        self,
        export_id: str,
        days: Sequence[dt.date],
        datasets: tuple[str, ...],
        run_id: str | None,
        mode: tuple[bool, bool, bool],
        events: queue.SimpleQueue[tuple[str, object]],
        current: dict[str, str],
        after_export: Callable[[Runner, str], Iterable[object]] | None,
    ) -> ExportOutcome:
        began = time.monotonic()
        outcome = ExportOutcome(export_id)
        try:
            export = self.store.get_export(export_id)
        except NotFound:
            outcome.status = INACTIVE
            return outcome
        except ExportError as exc:
            outcome.status, outcome.errors = FAILED, [("-", exc.message)]
            return outcome
        rewrite = mode[0] or mode[1]
        now = self.clock()
        # A scheduled run carries the datasets of every export in its batch: one of this export's
        # that waits out its backoff is not tried before its time (sim seed 4).
        names = [
            d.dataset
            for d in export.datasets
            if (not datasets or d.dataset in datasets) and (rewrite or not planner.waiting_for_backoff(export, d, now))
        ]
        if export.status != ACTIVE:
            # Queued work of a paused or deleted export ends here, without touching its bucket.
            outcome.status = INACTIVE
            if self._notes is not None:
                for dataset in names:
                    message = f"export {export_id} is {export.status}; nothing written"
                    self._notes.ended_before(export_id, dataset, days[0], run_log.CANCELED, message)
            return outcome
        try:
            claimed = self._claim(export_id)
        except ExportError as exc:
            outcome.status, outcome.errors = FAILED, [("-", exc.message)]
            return outcome
        if not claimed:
            outcome.status = BUSY
            return outcome
        todo = [(day, dataset) for day in days for dataset in names]
        try:
            while todo:
                day, dataset = todo[0]
                current[export_id] = dataset
                self._dataset(outcome, export_id, dataset, day, run_id, mode, events)
                todo.pop(0)
            if after_export is not None and not outcome.errors:
                for note in after_export(self._runner(final=True), export_id):
                    events.put(("note", note))
        except RunInterrupted as exc:
            outcome.status = INTERRUPTED
            outcome.errors.append((current.get(export_id, "-"), exc.message))
            # Canceled, not failed: the one in progress and those it never reached.
            for i, (day, dataset) in enumerate(todo):
                if i and self._notes is not None:
                    self._notes.start(export_id, dataset, day)
                self._finish(export_id, dataset, run_log.CANCELED, exc.message)
        except ExportError as exc:
            outcome.errors.append((current.get(export_id, "-"), exc.message))
            self._close_rest(export_id, todo, exc.message)
        except Exception as exc:  # ours to fix; recorded, never allowed to stop the other exports
            outcome.errors.append((current.get(export_id, "-"), f"internal error ({type(exc).__name__})"))
            self._close_rest(export_id, todo, f"internal error ({type(exc).__name__})")
        finally:
            self.leases.release(export_id, self.holder)
        if outcome.errors and outcome.status == DONE:
            outcome.status = FAILED
        outcome.seconds = time.monotonic() - began
        return outcome

    def _close_rest(self, export_id: str, todo: list[tuple[dt.date, str]], message: str) -> None:
        """An error outside a dataset's own run (lease renewal, reconciliation): the dataset in
        progress, if any, failed with it."""
        if todo:
            self._finish(export_id, todo[0][1], run_log.FAILED, message)

    def _claim(self, export_id: str) -> bool:
        if self.leases.claim(export_id, self.holder, self.clock()):
            return True
        other = self.leases.holder(export_id, self.clock())
        if other is None or self.holder_ended is None or not self.holder_ended(other):
            return False
        return self.leases.take_over(export_id, other, self.holder, self.clock())

    def _runner(self, *, final: bool) -> Runner:
        return self.make_runner(count_retryable=final, before_file=self._renew)

    def _dataset(
        self,
        outcome: ExportOutcome,
        export_id: str,
        dataset: str,
        day: dt.date,
        run_id: str | None,
        mode: tuple[bool, bool, bool],
        events: queue.SimpleQueue[tuple[str, object]],
    ) -> None:
        rewrite, replace, redeliver = mode

        def relay(report: WindowReport) -> None:
            events.put(("window", (export_id, report)))

        if self._notes is not None:
            self._notes.start(export_id, dataset, day)
        attempts = len(self.retry_delays_s) + 1
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                report = self._runner(final=final).run_day(
                    export_id,
                    dataset,
                    day,
                    run_id=run_id,
                    rewrite=rewrite,
                    replace=replace,
                    redeliver=redeliver,
                    on_window=relay,
                )
            except RunInterrupted:
                raise
            except ExportError as exc:
                if exc.retryable and not final:
                    self.sleep(self.retry_delays_s[attempt])
                    continue
                self._failed(outcome, export_id, dataset, exc.message, past_day=day if rewrite or replace else None)
                return
            except Exception as exc:  # the runner recorded it in the ledger; keep the type only
                self._failed(outcome, export_id, dataset, f"internal error ({type(exc).__name__})")
                return
            outcome.reports.append(report)
            self._finish(export_id, dataset, run_log.SUCCEEDED)
            return

    def _failed(
        self, outcome: ExportOutcome, export_id: str, dataset: str, message: str, past_day: dt.date | None = None
    ) -> None:
        outcome.errors.append((dataset, message))
        outcome.retries[dataset] = note = self._retry_note(export_id, dataset, message, past_day)
        self._finish(export_id, dataset, run_log.FAILED, f"{message} ({note})")
