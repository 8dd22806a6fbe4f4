"""Reconciliation: find rows that appeared late inside committed windows and append them.

The window contract places a row by ``recorded_at``, and Sequenzy assigns ``recorded_at`` when it
writes the row, so a row normally lands in a window that is still open. It can land in a window that
is already exported only when its write becomes visible more than the lag (2 minutes) after the
time it carries: a transaction held open that long, a replica that far behind, a backfill by hand,
a clock step. The window then misses it.

This pass repairs that without replacing any file. The part ledger keeps, for every part, the ids it
carries; a recent committed window's ids in the source, minus the ids its parts carry, are exactly
the rows not yet delivered, whatever else changed (a window that lost one row and gained another
still yields the new one). They go out as additional parts of the same window, numbered on after
its last part, in ``(recorded_at, id)`` order (`Runner.write_window`). Rows deleted since (a GDPR
erasure) are not un-delivered: nothing is ever deleted from the customer's bucket.

Cost: the ids are stored deflated in the ledger, about 5-9 bytes per row (benchmarks/), and pruned
once a window is older than any reconciliation looks back (`PRUNE_AFTER_MS`); each check reads the
window's ids from the source (one index range scan). Limits: windows whose ids were pruned, or that
were written before the part ledger existed, are not checked; a row that changes its ``recorded_at``
into another window is seen as new there (its id stays the deduplication key).

It never moves a position (the windows it appends to are behind it) and skips a dataset while it is
failing, because a successful append would clear the last error the customer must still see.
Run it inside the export's own run (one run per export at a time), never beside one: every scheduled
run of an event asset does, after its due windows (`seqexport_dagster.defs.assets`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seqexport_dagster.runner import Runner, WindowReport
from seqexport_dagster.schema import EVENT_DATASETS
from seqexport_dagster.store import ACTIVE, ExportRecord
from seqexport_dagster.window import DAY_MS, Window, frequency_ms

DEFAULT_LOOKBACK_MS = DAY_MS
#: Part ids of committed windows older than this are dropped: no lookback reaches them.
PRUNE_AFTER_MS = 7 * DAY_MS


@dataclass(frozen=True, slots=True)
class Reconciled:
    """One committed window that was checked for late rows."""

    dataset: str
    window: Window
    late_rows: int
    report: WindowReport | None  # set when rows were appended

    @property
    def changed(self) -> bool:
        return self.late_rows > 0


def lookback_for(export: ExportRecord, lateness_ms: int) -> int:
    """The lookback that lets the next scheduled run repair a row visible up to ``lateness_ms`` late.

    A row that becomes visible at V carries ``recorded_at`` >= V - lateness, and its window ends no
    earlier than that. The next scheduled run of the export starts about one frequency plus the lag
    after V; one more frequency covers a run that starts late (sensor tick, queue, a catch-up day).
    """
    return lateness_ms + 2 * frequency_ms(export.frequency) + export.lag_ms


def reconcile(
    runner: Runner,
    export_id: str,
    *,
    lookback_ms: int = DEFAULT_LOOKBACK_MS,
    lateness_ms: int | None = None,
    datasets: Iterable[str] | None = None,
    run_id: str | None = None,
) -> list[Reconciled]:
    """Check the committed windows of the last ``lookback_ms`` of recorded time; append late rows.

    ``lateness_ms``, when given, replaces ``lookback_ms`` by `lookback_for` the export (what the
    scheduled runs use: the cost then follows the export's frequency).
    Raises what `Runner.write_window` raises (an `ExportError`, or `RunInterrupted` on pause).
    """
    export = runner.store.get_export(export_id)
    if export.status != ACTIVE:
        return []
    if lateness_ms is not None:
        lookback_ms = lookback_for(export, lateness_ms)
    now = runner.clock()
    since = now - lookback_ms
    wanted = set(datasets) if datasets is not None else set(EVENT_DATASETS)
    results: list[Reconciled] = []
    for state in export.datasets:
        if state.dataset not in wanted or state.dataset not in EVENT_DATASETS or state.failures:
            continue
        runner.store.prune_part_ids(export_id, state.dataset, before_ms=now - max(PRUNE_AFTER_MS, lookback_ms))
        recent = runner.store.committed_since(export_id, state.dataset, since_ms=since, until_ms=state.position_ms)
        for window in recent:
            if not runner.store.committed_at(export_id, state.dataset, window, export.location):
                continue  # last committed elsewhere, before a destination change
            ledger = runner.store.window_parts(export_id, state.dataset, window, export.location)
            late = runner.late_ids(export, state.dataset, window, ledger)
            report = runner.write_window(export_id, state.dataset, window, run_id=run_id) if late else None
            results.append(Reconciled(state.dataset, window, len(late), report))
    return results
