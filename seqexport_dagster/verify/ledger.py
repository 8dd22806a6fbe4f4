"""The ledger diff (operators only): rows per window in the bucket against the control plane.

Days older than the retention horizon are compacted into per-day summaries (`store.window_days`):
for those, every window the summary names must be in the bucket and the day's rows must add up
to the summary's; the same problem kinds are reported, the rows one per day.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqexport_dagster.verify.report import Problem
from seqexport_dagster.window import Window

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane
    from seqexport_dagster.store.window_days import WindowDay


def _compacted_problems(
    rows_by_window: dict[tuple[str, Window], int], days: list[WindowDay], starts: dict[str, int]
) -> list[Problem]:
    problems: list[Problem] = []
    for day in sorted(days, key=lambda d: (d.dataset, d.date)):
        if day.dataset not in starts:
            continue
        wanted = [w for w in day.windows if w.from_ms >= starts[day.dataset]]
        missing = [w for w in wanted if (day.dataset, w) not in rows_by_window]
        for w in missing:
            problems.append(
                Problem("ledger_window_missing", day.dataset, str(w), f"committed (day {day.date}), not in bucket")
            )
        if missing or len(wanted) != len(day.windows):
            continue
        found = sum(rows_by_window[(day.dataset, w)] for w in wanted)
        if found != day.rows:
            problems.append(
                Problem(
                    "ledger_rows_mismatch",
                    day.dataset,
                    day.date,
                    f"bucket has {found} rows on {day.date}, ledger {day.rows} (compacted day)",
                )
            )
    return problems


def ledger_problems(
    rows_by_window: dict[tuple[str, Window], int], store: ControlPlane, export_id: str, source: str
) -> list[Problem]:
    """Rows per window in the bucket against the latest committed attempt in the ledger.

    Only windows from the start of the bucket's chain on are compared: after a destination change
    the earlier windows live in the old location.
    """
    from seqexport_dagster.ledger_scope import committed_elsewhere, compacted_days
    from seqexport_dagster.store import COMMITTED

    problems: list[Problem] = []
    latest: dict[tuple[str, Window], int] = {}
    for entry in store.ledger(export_id):
        if entry.status == COMMITTED:
            latest[(entry.dataset, entry.window)] = entry.rows
    starts: dict[str, int] = {}
    for dataset, window in rows_by_window:
        starts[dataset] = min(starts.get(dataset, window.from_ms), window.from_ms)
    elsewhere = committed_elsewhere(store, export_id, source)
    every_day, days_here = compacted_days(store, export_id, source)
    compacted = {(d.dataset, w) for d in every_day for w in d.windows}
    for (dataset, window), rows in sorted(latest.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if dataset not in starts or window.from_ms < starts[dataset] or (dataset, window) in elsewhere:
            continue
        found = rows_by_window.get((dataset, window))
        if found is None:
            problems.append(
                Problem("ledger_window_missing", dataset, str(window), f"committed with {rows} rows, not in bucket")
            )
        elif found != rows:
            problems.append(
                Problem("ledger_rows_mismatch", dataset, str(window), f"bucket has {found} rows, ledger {rows}")
            )
    problems += _compacted_problems(rows_by_window, days_here, starts)
    for (dataset, window), rows in sorted(rows_by_window.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if (dataset, window) not in latest and (dataset, window) not in compacted:
            problems.append(
                Problem("not_in_ledger", dataset, str(window), f"{rows} rows in the bucket, no committed window")
            )
    return problems
