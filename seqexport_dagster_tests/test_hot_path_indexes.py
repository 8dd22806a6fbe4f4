"""Issue 23, item 4: every hot-path query stays on an index (PostgreSQL ``EXPLAIN``).

The control plane is loaded with rows in the exact shapes the runner writes (`support.metadata_rows`):
a fleet of exports with 16 days of 15-minute history, a few of them with two months, one
export compacted by `maintain`, then ``ANALYZE``. The SQL is not re-typed here: each hot path runs
for real (the sensor tick's queries, status, history, leases, reconciliation, `verify --ledger`)
while a ``before_cursor_execute`` listener captures every statement it sends with its parameters;
each one is then ``EXPLAIN``-ed and must not scan a big table sequentially.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from seqexport_dagster.history import history
from seqexport_dagster.reconcile import reconcile
from seqexport_dagster.status import export_status
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.fleet import changed_since, day_totals, unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.maintenance import maintain
from seqexport_dagster.verify.ledger import ledger_problems
from seqexport_dagster.window import DAY_MS, Window, day_of
from seqexport_dagster_tests.support.metadata_rows import copy_summaries, deliver_template, export_id, replicate
from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database

BIG_TABLES = ("windows", "parts", "run_log", "window_days")
FLEET = 120
DEEP = 3
FLEET_DAYS = 16
DEEP_DAYS = 60
SEQ_SCAN = re.compile(r"Seq Scan on (" + "|".join(BIG_TABLES) + r")\b")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str, int]]:
    root = tmp_path_factory.mktemp("indexes")
    with postgres_database() as control, postgres_database() as source:
        world = World(Path(root), control, source, Clock(DAY0), box=SecretBox.parse(new_key_spec("t1")))
        try:
            template = deliver_template(world, 8)
            now = world.clock()
            for k in range(1, DEEP + 1):
                replicate(world.control_engine, template, [k], range(-(DEEP_DAYS - 1), 1), now)
            fleet = list(range(DEEP + 1, DEEP + FLEET + 1))
            replicate(world.control_engine, template, fleet, range(-(FLEET_DAYS - 1), 1), now)
            maintain(world.control_engine, now)  # every export's days older than 14 are now summaries
            copy_summaries(world.control_engine, export_id(1), fleet)  # as if the fleet were as old
            raw = sa.create_engine(control, isolation_level="AUTOCOMMIT")
            with raw.connect() as conn:
                conn.execute(sa.text("ANALYZE"))
            raw.dispose()
            yield world, template, now
        finally:
            world.dispose()


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
    }


@pytest.mark.postgres
@pytest.mark.parametrize(
    "path",
    ["sensor tick", "status", "history", "leases", "reconciliation", "verify --ledger", "backfill of a compacted day"],
)
def test_hot_path_queries_stay_on_an_index(loaded: tuple[World, str, int], path: str) -> None:
    world, template, now = loaded
    statements = captured(world.control_engine, hot_paths(world, template, now)[path])
    assert statements, f"{path}: no query was captured"
    big = [s for s, _ in statements if any(re.search(rf"\b{t}\b", s) for t in BIG_TABLES)]
    # Status reads the export and its datasets' positions, leases their own small table; every
    # other path reads the ledger.
    assert bool(big) == (path not in ("status", "leases")), f"{path}: {len(big)} queries on big tables"
    bad = seq_scans(world.control_engine, statements)
    assert not bad, f"{path}: sequential scans of big tables:\n\n" + "\n\n".join(bad)


@pytest.mark.postgres
def test_the_load_is_big_enough_that_a_full_scan_would_show(loaded: tuple[World, str, int]) -> None:
    """The planner only prefers indexes when the tables are big: check the load is, and that a
    query with no usable index does show as a sequential scan (the check can fail)."""
    world, _, _ = loaded
    with world.control_engine.connect() as conn:
        windows = conn.execute(sa.text("SELECT count(*) FROM windows")).scalar_one()
        summaries = conn.execute(sa.text("SELECT count(*) FROM window_days")).scalar_one()
    assert windows > 30_000 and summaries > 10_000
    bad = seq_scans(world.control_engine, [("SELECT count(*) FROM windows WHERE rows > %(n)s", {"n": 3})])
    assert bad and "Seq Scan on windows" in bad[0]
