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
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.maintenance import maintain
from seqexport_dagster_tests.support.explain import BIG_TABLES, captured, hot_paths, seq_scans
from seqexport_dagster_tests.support.metadata_rows import copy_summaries, deliver_template, export_id, replicate
from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database

FLEET = 120
DEEP = 3
FLEET_DAYS = 16
DEEP_DAYS = 60


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


@pytest.mark.postgres
@pytest.mark.parametrize(
    "path",
    [
        "sensor tick",
        "status",
        "history",
        "leases",
        "reconciliation",
        "verify --ledger",
        "backfill of a compacted day",
        "stranded parts after a move",
    ],
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
