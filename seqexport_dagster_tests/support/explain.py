"""Capture the SQL a hot path sends, then ``EXPLAIN`` each statement and find sequential scans of
the control plane's big tables (issue 23, item 4: `test_hot_path_indexes`, `benchmarks.metadata_year`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from seqexport_dagster.contract.window import DAY_MS, Window, day_of
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.management.history import history
from seqexport_dagster.management.status import export_status
from seqexport_dagster.management.verify.ledger import ledger_problems
from seqexport_dagster.store import PRUNE_AFTER_MS
from seqexport_dagster.store.fleet import changed_since, day_totals, unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster_tests.support.metadata_rows import export_id
from seqexport_dagster_tests.support.world import World

BIG_TABLES = ("windows", "parts", "run_log", "window_days")
SEQ_SCAN = re.compile(r"Seq Scan on (" + "|".join(BIG_TABLES) + r")\b")


def captured(engine: sa.Engine, run: Callable[[], Any]) -> list[tuple[str, Any]]:
    statements: list[tuple[str, Any]] = []

    def listen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if not executemany and statement.lstrip().split(None, 1)[0].upper() in ("SELECT", "UPDATE", "DELETE"):
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", listen)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    return statements


def seq_scans(engine: sa.Engine, statements: list[tuple[str, Any]]) -> list[str]:
    bad = []
    with engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        for statement, parameters in statements:
            cursor.execute("EXPLAIN " + statement, parameters)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            if SEQ_SCAN.search(plan):
                bad.append(f"{statement}\n{plan}")
        conn.rollback()
    return bad


def hot_paths(world: World, template: str, now: int) -> dict[str, Callable[[], Any]]:
    store, engine = world.store, world.control_engine
    deep = export_id(1)
    leases = Leases(engine)
    bucket = {(w.dataset, w.window): w.rows for w in store.ledger(deep) if w.status == "committed"}

    def tick() -> None:
        store.list_exports()
        leases.held(now)
        unfinished_attempts(engine)
        changed_since(engine, now - 30_000)
        day_totals(engine, "email_events", [day_of(now - DAY_MS)])

    def lease_cycle() -> None:
        assert leases.claim(deep, "run-1", now)
        leases.renew(deep, "run-1", now + 1)
        leases.holder(deep, now + 2)
        leases.take_over(deep, "run-1", "run-2", now + 3)
        leases.release(deep, "run-2")

    def verify_ledger() -> None:
        assert ledger_problems(bucket, store, deep, f"file://{world.root / 'bucket'}") == []

    return {
        "sensor tick": tick,
        "status": lambda: export_status(store.get_export(deep), now),
        "history": lambda: history(store, deep, now),
        "leases": lease_cycle,
        "reconciliation": lambda: reconcile(world.runner(), template),
        "verify --ledger": verify_ledger,
        "backfill of a compacted day": lambda: store.committed_windows(
            deep, "email_events", Window.whole_day(day_of(now - 30 * DAY_MS)).date_key
        ),
        # A pass of a table-keeping export after a move: every attempt of the deep export is at a
        # place other than this one (`reconcile`, `delivery.table_moves.stranded_parts`).
        "stranded parts after a move": lambda: store.windows_landed_elsewhere_unsettled(
            deep, "email_events", "moved-here", now, after_ms=now - PRUNE_AFTER_MS
        ),
    }
