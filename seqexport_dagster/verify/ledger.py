"""The ledger diff (operators only): rows per window in the bucket against the control plane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqexport_dagster.verify.report import Problem
from seqexport_dagster.window import Window

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane


def ledger_problems(
    rows_by_window: dict[tuple[str, Window], int], store: ControlPlane, export_id: str, source: str
) -> list[Problem]:
    """Rows per window in the bucket against the latest committed attempt in the ledger.

    Only windows from the start of the bucket's chain on are compared: after a destination change
    the earlier windows live in the old location.
    """
    from seqexport_dagster.ledger_scope import committed_elsewhere
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
    for (dataset, window), rows in sorted(rows_by_window.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if (dataset, window) not in latest:
            problems.append(
                Problem("not_in_ledger", dataset, str(window), f"{rows} rows in the bucket, no committed window")
            )
    return problems
