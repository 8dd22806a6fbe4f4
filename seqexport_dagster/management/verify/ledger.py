"""The ledger diff (operators only): rows per window in the bucket against the control plane.

Days older than the retention horizon are compacted into per-day summaries (`store.window_days`):
for those, every window the summary names must be in the bucket and the day's rows must add up
to the summary's; the same problem kinds are reported, the rows one per day.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqexport_dagster.contract.window import Window
from seqexport_dagster.management.verify.report import Problem
from seqexport_dagster.management.verify.unfinished import abandoned_windows, late_parts_left

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
    """Rows per window in the bucket against the ledger's latest committed attempt *at this place*.

    The ledger records where each attempt wrote. After a destination change a window may be at
    both places: delivered whole at the old one, and continued with its late rows at the new one;
    each place is compared with what was committed there. A window in the bucket that was only
    committed elsewhere (an attempt started over at the new place) is not reported. When the place
    cannot be recognised (nothing was ever committed here, or the HTTP API's ledger, which carries no
    places), the latest committed attempt anywhere is compared, from the start of the bucket's chain.
    Days compacted into summaries are compared day by day (`_compacted_problems`). A window an
    attempt left here that nothing will finish (its dataset removed, the export deleted) is compared
    with the parts the ledger recorded for it (`verify.unfinished`).
    """
    from seqexport_dagster.store import COMMITTED, is_control_plane

    latest: dict[tuple[str, Window], int] = {}
    for entry in store.ledger(export_id):
        if entry.status == COMMITTED:
            latest[(entry.dataset, entry.window)] = entry.rows
    starts: dict[str, int] = {}
    for dataset, window in rows_by_window:
        starts[dataset] = min(starts.get(dataset, window.from_ms), window.from_ms)
    every_day: list[WindowDay] = []
    days_here: list[WindowDay] = []
    if is_control_plane(store):  # the HTTP API's ledger (remote CLI) has no summaries
        from seqexport_dagster.management.verify.ledger_scope import compacted_days

        every_day, days_here = compacted_days(store, export_id, source)
    here = committed_here(store, export_id, source)
    if here is None and _summarised_here(store, export_id, source, every_day):
        here = {}  # every window here was compacted: the place is known by its summaries
    if here is None:
        expected = {k: v for k, v in latest.items() if k[0] in starts and k[1].from_ms >= starts[k[0]]}
    else:
        expected = here
    problems: list[Problem] = []
    differ = {k: rows_by_window[k] for k, rows in expected.items() if rows_by_window.get(k, rows) != rows}
    settled_for_good = late_parts_left(store, export_id, source, differ)
    for (dataset, window), rows in sorted(expected.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        found = rows_by_window.get((dataset, window))
        if found is None:
            problems.append(
                Problem("ledger_window_missing", dataset, str(window), f"committed with {rows} rows, not in bucket")
            )
        elif found != rows and (dataset, window) not in settled_for_good:
            problems.append(
                Problem("ledger_rows_mismatch", dataset, str(window), f"bucket has {found} rows, ledger {rows}")
            )
    compacted = {(d.dataset, w) for d in every_day for w in d.windows}
    problems += _compacted_problems(rows_by_window, days_here, starts)
    unknown = {k: v for k, v in rows_by_window.items() if k not in latest and k not in compacted}
    left_for_good = abandoned_windows(store, export_id, source, unknown)
    for (dataset, window), rows in sorted(unknown.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if (dataset, window) not in left_for_good:
            problems.append(
                Problem("not_in_ledger", dataset, str(window), f"{rows} rows in the bucket, no committed window")
            )
    return problems


def committed_here(store: ControlPlane, export_id: str, source: str) -> dict[tuple[str, Window], int] | None:
    """Rows of the latest committed attempt of each window at ``source``; ``None`` when the place is
    not recognised (`ledger_scope.source_locations`: no attempt was ever made there)."""
    from seqexport_dagster.store import COMMITTED, is_control_plane

    if not is_control_plane(store):
        return None  # the HTTP API's ledger (remote CLI) carries no locations
    import sqlalchemy as sa

    from seqexport_dagster.management.verify.ledger_scope import attempted_at, source_locations
    from seqexport_dagster.store.tables import windows

    export = store.get_export(export_id)
    places = source_locations(source, {export.endpoint})
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(windows.c.dataset, windows.c.from_ms, windows.c.to_ms, windows.c.rows, windows.c.parts)
            .where(
                windows.c.export_id == export_id,
                windows.c.status == COMMITTED,
                windows.c.location.in_(sorted(places)),
            )
            .order_by(windows.c.id)
        ).all()
    if not rows:
        return {} if attempted_at(store, export_id, places) else None
    # A commit with no part and no row here claims nothing in this bucket: a late-rows pass that
    # found every row already delivered at an earlier place (it clears the window's error; sim
    # seed 10000000 at 3 days; seed 8002 too). A window written here always has a part, an empty 0000 at least.
    return {(r.dataset, Window(r.from_ms, r.to_ms)): r.rows for r in rows if r.parts or r.rows}


def _summarised_here(store: ControlPlane, export_id: str, source: str, days: list[WindowDay]) -> bool:
    """Whether a compacted day's summary names ``source`` as its place."""
    from seqexport_dagster.store import is_control_plane

    if not days or not is_control_plane(store):
        return False
    from seqexport_dagster.management.verify.ledger_scope import source_locations

    places = source_locations(source, {store.get_export(export_id).endpoint})
    return any(d.location in places for d in days)
