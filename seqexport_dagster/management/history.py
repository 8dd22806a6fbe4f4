"""The customer's run history: what each run delivered, where, for which day and by which trigger.

Two sources, merged per run id:
- the windows ledger (what reached the bucket): for every window a run attempted, the *last*
  attempt of that run decides. A window that was started over at a new destination and then
  committed there counts as delivered, as Dagster shows the run (success), with a note saying so;
- the run log (`store.run_log`): the trigger and day of runs started through Dagster, and runs that
  ended before writing anything (paused or deleted before their first file), which the ledger
  never sees.

Statuses use the words of Dagster's run page: succeeded, failed, canceled, running.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from seqexport_dagster.store import CANCELED, COMMITTED, FAILED, HISTORY_MS, RUNNING, WORKER_LOST, LedgerWindow

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane
    from seqexport_dagster.store.run_log import RunLogEntry

SUCCEEDED: Final = "succeeded"
RESTARTED_NOTE: Final = "destination changed during the run; started over and delivered at the new destination"
_ORDER: Final = ("running", "failed", "canceled", SUCCEEDED)
_WORDS: Final[dict[str, str]] = {COMMITTED: SUCCEEDED, RUNNING: "running", FAILED: "failed", CANCELED: "canceled"}


@dataclass(frozen=True, slots=True)
class RunHistory:
    """One run as the customer's history shows it. Field names extend `store.RunSummary`'s."""

    run_id: str
    started_at: int
    finished_at: int | None
    status: str
    datasets: tuple[str, ...]
    days: tuple[str, ...]
    trigger: str | None
    windows: int
    rows: int
    files: int
    bytes: int
    error: str | None
    note: str | None = None


def _final_attempts(ws: list[LedgerWindow]) -> tuple[list[LedgerWindow], bool]:
    """The last attempt per (dataset, window) within one run, and whether one was restarted and then delivered."""
    last: dict[tuple[str, int, int], LedgerWindow] = {}
    restarted = False
    for w in sorted(ws, key=lambda x: x.id):
        key = (w.dataset, w.window.from_ms, w.window.to_ms)
        before = last.get(key)
        if before is not None and before.status == CANCELED and w.status == COMMITTED:
            restarted = True
        last[key] = w
    return list(last.values()), restarted


def _close_lost(entries: list[RunLogEntry]) -> list[RunLogEntry]:
    """A run still "running" for a dataset that a later run has since started lost its worker (only
    one run per export writes at a time): show it failed, as the ledger does (`store.WORKER_LOST`)."""
    latest: dict[str, int] = {}
    for e in entries:
        latest[e.dataset] = max(latest.get(e.dataset, e.started_at), e.started_at)
    return [
        replace(e, status="failed", message=e.message or WORKER_LOST)
        if e.status == "running" and latest[e.dataset] > e.started_at
        else e
        for e in entries
    ]


def summarize(ledger: Iterable[LedgerWindow], log: Iterable[RunLogEntry]) -> list[RunHistory]:
    """Newest first. Pure: the ledger rows and run-log entries of one export."""
    runs: dict[str, list[LedgerWindow]] = {}
    for w in ledger:
        runs.setdefault(w.run_id or f"window-{w.id}", []).append(w)
    logged: dict[str, list[RunLogEntry]] = {}
    for e in _close_lost(list(log)):
        logged.setdefault(e.run_id, []).append(e)
    out = []
    for run_id in {*runs, *logged}:
        attempts = runs.get(run_id, [])
        entries = logged.get(run_id, [])
        final, restarted = _final_attempts(attempts)
        statuses = {_WORDS.get(w.status, w.status) for w in final}
        # Dagster's outcome counts when it is worse than the ledger's, or when the run wrote nothing.
        statuses |= {e.status for e in entries if e.status in ("failed", "canceled") or not final}
        status = next((s for s in _ORDER if s in statuses), SUCCEEDED)
        delivered = [w for w in final if w.status == COMMITTED]
        errors = [w.error for w in final if w.error and w.status != COMMITTED]
        errors += [e.message for e in entries if e.message and e.status in ("failed", "canceled")]
        finished = [w.finished_at for w in final if w.finished_at is not None]
        finished += [e.finished_at for e in entries if e.finished_at is not None]
        triggers = sorted({e.trigger for e in entries})
        out.append(
            RunHistory(
                run_id=run_id,
                started_at=min([w.started_at for w in attempts] + [e.started_at for e in entries]),
                finished_at=max(finished) if finished and status != "running" else None,
                status=status,
                datasets=tuple(sorted({w.dataset for w in attempts} | {e.dataset for e in entries})),
                days=tuple(sorted({w.window.date_key for w in attempts} | {e.date for e in entries})),
                trigger=", ".join(triggers) if triggers else None,
                windows=len(delivered),
                rows=sum(w.rows for w in delivered),
                files=sum(w.parts for w in delivered),
                bytes=sum(w.bytes for w in delivered),
                error=errors[-1] if errors else None,
                note=RESTARTED_NOTE if restarted else None,
            )
        )
    return sorted(out, key=lambda r: (r.started_at, r.run_id), reverse=True)


def history(store: ControlPlane, export_id: str, now_ms: int) -> list[RunHistory]:
    """Every run of the last 14 days of one export, newest first."""
    # Here, not at the top: `RunHistory` travels to the remote CLI, which has no database to read.
    from seqexport_dagster.store.run_log import RunLog

    since = now_ms - HISTORY_MS
    return summarize(store.ledger(export_id, since_ms=since), RunLog(store.engine).entries(export_id, since))
