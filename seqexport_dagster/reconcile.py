"""Reconciliation: recount recent windows in the source and rewrite any that changed.

The window contract places a row by ``recorded_at``, and Sequenzy assigns ``recorded_at`` when it
writes the row, so a row normally lands in a window that is still open. It can land in a window that
is already exported only when its write becomes visible more than the lag (2 minutes) after the
time it carries: a transaction held open that long, a replica that far behind, a backfill by hand,
a clock step. The window then misses it. This pass repairs that after the fact, and also windows
whose rows were deleted since (a GDPR erasure): it counts each recent committed window in the source
again and, where the count differs from what the ledger says we wrote, rewrites the whole window
with the same names through `Runner.write_window`. Parts that the smaller window no longer needs
are overwritten with empty gzip, so a row is never read twice.

What it does not see: a window in which as many rows were added as removed (the count is equal).
It never moves a position (the windows it rewrites are behind it) and skips a dataset while it is
failing, because a successful rewrite would clear the last error the customer must still see.
Run it inside the export's own run (one run per export at a time), never beside one: every scheduled
run of an event asset does, after its due windows (`seqexport_dagster.defs.assets`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from seqexport_dagster.runner import Runner, WindowReport
from seqexport_dagster.schema import EVENT_DATASETS
from seqexport_dagster.store.store import ACTIVE, COMMITTED, ExportRecord
from seqexport_dagster.store.tables import windows
from seqexport_dagster.window import DAY_MS, Window, frequency_ms

DEFAULT_LOOKBACK_MS = DAY_MS


@dataclass(frozen=True, slots=True)
class Reconciled:
    """One committed window that was recounted."""

    dataset: str
    window: Window
    exported_rows: int
    source_rows: int
    report: WindowReport | None  # set when the window was rewritten

    @property
    def changed(self) -> bool:
        return self.exported_rows != self.source_rows


def lookback_for(export: ExportRecord, lateness_ms: int) -> int:
    """The lookback that lets the next scheduled run repair a row visible up to ``lateness_ms`` late.

    A row that becomes visible at V carries ``recorded_at`` >= V - lateness, and its window ends no
    earlier than that. The next scheduled run of the export starts about one frequency plus the lag
    after V; one more frequency covers a run that starts late (sensor tick, queue, a catch-up day).
    """
    return lateness_ms + 2 * frequency_ms(export.frequency) + export.lag_ms


def committed_counts(runner: Runner, export_id: str, dataset: str, since_ms: int, location: str) -> dict[Window, int]:
    """Rows of the latest commit of every window ending after ``since_ms`` at ``location``."""
    query = (
        sa.select(windows.c.from_ms, windows.c.to_ms, windows.c.rows, windows.c.location)
        .where(
            windows.c.export_id == export_id,
            windows.c.dataset == dataset,
            windows.c.status == COMMITTED,
            windows.c.to_ms > since_ms,
        )
        .order_by(windows.c.id)
    )
    latest: dict[Window, tuple[int, str]] = {}
    with runner.store.engine.connect() as conn:
        for r in conn.execute(query):
            latest[Window(r.from_ms, r.to_ms)] = (r.rows, r.location)
    # A window last committed elsewhere (before a destination change) belongs to the old bucket.
    return {w: rows for w, (rows, where) in latest.items() if where == location}


def reconcile(
    runner: Runner,
    export_id: str,
    *,
    lookback_ms: int = DEFAULT_LOOKBACK_MS,
    lateness_ms: int | None = None,
    datasets: Iterable[str] | None = None,
    run_id: str | None = None,
) -> list[Reconciled]:
    """Recount the windows of the last ``lookback_ms`` of recorded time; rewrite those that changed.

    ``lateness_ms``, when given, replaces ``lookback_ms`` by `lookback_for` the export (what the
    scheduled runs use: the cost then follows the export's frequency).
    Raises what `Runner.write_window` raises (an `ExportError`, or `RunInterrupted` on pause).
    """
    export = runner.store.get_export(export_id)
    if export.status != ACTIVE:
        return []
    if lateness_ms is not None:
        lookback_ms = lookback_for(export, lateness_ms)
    since = runner.clock() - lookback_ms
    wanted = set(datasets) if datasets is not None else set(EVENT_DATASETS)
    results: list[Reconciled] = []
    for state in export.datasets:
        if state.dataset not in wanted or state.dataset not in EVENT_DATASETS or state.failures:
            continue
        counts = committed_counts(runner, export_id, state.dataset, since, export.location)
        for window in sorted(counts):
            if window.to_ms > state.position_ms:
                continue
            now = runner.source.count_window(state.dataset, export.account_id, window)
            report = None
            if now != counts[window]:
                report = runner.write_window(export_id, state.dataset, window, run_id=run_id)
            results.append(Reconciled(state.dataset, window, counts[window], now, report))
    return results
