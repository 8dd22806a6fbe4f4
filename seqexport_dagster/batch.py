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
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from seqexport_dagster.errors import ExportError, LeaseLost, NotFound, RunInterrupted
from seqexport_dagster.runner import DayReport, Runner, WindowReport
from seqexport_dagster.store import ACTIVE, ControlPlane
from seqexport_dagster.store.lease import Leases

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

    def run(
        self,
        export_ids: Iterable[str],
        days: Sequence[dt.date],
        datasets: Iterable[str],
        *,
        run_id: str | None,
        rewrite: bool,
        replace: bool = False,
        on_window: Callable[[str, WindowReport], None] | None = None,
        after_export: Callable[[Runner, str], Iterable[object]] | None = None,
        on_note: Callable[[object], None] | None = None,
    ) -> BatchReport:
        """Deliver ``days`` × ``datasets`` for each export; returns once each is done or past its deadline.

        ``after_export`` runs in the export's worker, still under its lease, once its datasets all
        succeeded (the scheduled runs' reconciliation); what it returns goes to ``on_note`` on the
        caller's thread, like ``on_window``.
        """
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
                    export_id, days, wanted, run_id, (rewrite, replace), events, current, after_export
                )
                events.put(("done", outcome))

        def spawn() -> None:
            threading.Thread(target=work, name="seqexport-batch", daemon=True).start()

        for _ in range(min(self.workers, len(ids))):
            spawn()
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
        if dataset is not None:
            self.store.record_failure(export_id, dataset, None, message, self.clock())
        return ExportOutcome(export_id, TIMED_OUT, errors=[(dataset or "-", message)], seconds=seconds)

    def _export(
        self,
        export_id: str,
        days: Sequence[dt.date],
        datasets: tuple[str, ...],
        run_id: str | None,
        mode: tuple[bool, bool],
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
        if export.status != ACTIVE:
            # Queued work of a paused or deleted export ends here, without touching its bucket.
            outcome.status = INACTIVE
            return outcome
        try:
            claimed = self._claim(export_id)
        except ExportError as exc:
            outcome.status, outcome.errors = FAILED, [("-", exc.message)]
            return outcome
        if not claimed:
            outcome.status = BUSY
            return outcome
        try:
            names = [d.dataset for d in export.datasets if not datasets or d.dataset in datasets]
            for day in days:
                for dataset in names:
                    current[export_id] = dataset
                    self._dataset(outcome, export_id, dataset, day, run_id, mode, events)
            if after_export is not None and not outcome.errors:
                for note in after_export(self._runner(final=True), export_id):
                    events.put(("note", note))
        except RunInterrupted as exc:
            outcome.status = INTERRUPTED
            outcome.errors.append((current.get(export_id, "-"), exc.message))
        except ExportError as exc:
            outcome.errors.append((current.get(export_id, "-"), exc.message))
        except Exception as exc:  # ours to fix; recorded, never allowed to stop the other exports
            outcome.errors.append((current.get(export_id, "-"), f"internal error ({type(exc).__name__})"))
        finally:
            self.leases.release(export_id, self.holder)
        if outcome.errors and outcome.status == DONE:
            outcome.status = FAILED
        outcome.seconds = time.monotonic() - began
        return outcome

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
        mode: tuple[bool, bool],
        events: queue.SimpleQueue[tuple[str, object]],
    ) -> None:
        rewrite, replace = mode

        def relay(report: WindowReport) -> None:
            events.put(("window", (export_id, report)))

        attempts = len(self.retry_delays_s) + 1
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                report = self._runner(final=final).run_day(
                    export_id, dataset, day, run_id=run_id, rewrite=rewrite, replace=replace, on_window=relay
                )
            except RunInterrupted:
                raise
            except ExportError as exc:
                if exc.retryable and not final:
                    self.sleep(self.retry_delays_s[attempt])
                    continue
                outcome.errors.append((dataset, exc.message))
                return
            except Exception as exc:  # the runner recorded it in the ledger; keep the type only
                outcome.errors.append((dataset, f"internal error ({type(exc).__name__})"))
                return
            outcome.reports.append(report)
            return
