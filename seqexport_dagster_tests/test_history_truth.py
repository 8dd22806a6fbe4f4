"""Issue 17, items 1 and 2: history is the truth (the merge of the windows ledger and the run log).

The end-to-end check against real Dagster runs (scheduled, moved mid-window, canceled before
writing, backfill; statuses compared with Dagster's) was written against the export x day runs and
is on branch `issue17-before-batched-runs`; it awaits re-wiring onto the batched runs.
"""

from __future__ import annotations

from seqexport_dagster.history import RESTARTED_NOTE
from seqexport_dagster.window import HOUR_MS
from seqexport_dagster_tests.world import DAY0

D0 = "2026-09-30"


def test_summarize_rules() -> None:
    """The pure merge of ledger and run log: the last attempt per window decides, the run log adds
    trigger and day, runs that wrote nothing appear, and a lost worker's run is closed as failed."""
    from seqexport_dagster.history import summarize
    from seqexport_dagster.store import WORKER_LOST, LedgerWindow
    from seqexport_dagster.store.run_log import RunLogEntry
    from seqexport_dagster.window import Window

    w1, w2 = Window(DAY0, DAY0 + HOUR_MS), Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)

    def attempt(i: int, run: str, window: Window, status: str, rows: int = 0, error: str | None = None) -> LedgerWindow:
        return LedgerWindow(i, "email_events", window, run, status, rows, 1, 10, error, DAY0 + i, DAY0 + i + 1, None)

    def entry(run: str, status: str, at: int, trigger: str = "scheduled", message: str | None = None) -> RunLogEntry:
        return RunLogEntry(run, "exp_1", "email_events", D0, trigger, status, message, DAY0 + at, None)

    ledger = [
        attempt(1, "moved", w1, "canceled", error="destination changed during the window; started over"),
        attempt(2, "moved", w1, "committed", rows=7),
        attempt(3, "broken", w2, "failed", error="access denied"),
    ]
    log = [
        entry("moved", "succeeded", 1),
        entry("broken", "failed", 3, message="access denied (retries at ...)"),
        entry("paused-first", "canceled", 5, trigger="manual", message="export exp_1 is paused"),
        entry("lost", "running", 6),
        entry("later", "succeeded", 9, trigger="export now"),
    ]
    runs = {r.run_id: r for r in summarize(ledger, log)}
    assert (runs["moved"].status, runs["moved"].windows, runs["moved"].rows) == ("succeeded", 1, 7)
    assert runs["moved"].note == RESTARTED_NOTE and runs["moved"].error is None
    assert runs["broken"].status == "failed" and runs["broken"].error == "access denied (retries at ...)"
    paused = runs["paused-first"]
    assert (paused.status, paused.trigger, paused.days, paused.windows) == ("canceled", "manual", (D0,), 0)
    assert runs["lost"].status == "failed" and runs["lost"].error == WORKER_LOST
    assert runs["later"].trigger == "export now" and runs["later"].status == "succeeded"
    assert [r.run_id for r in summarize(ledger, log)][0] == "later"  # newest first
