"""Issue 40: `store.prepared` runs a statement on the driver's cursor with exactly what
``conn.execute`` gives: the same rows with the same types (SQLite's Boolean, PostgreSQL's bytea),
the same row counts, the same errors, and it steps aside for a connection with event listeners."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.prepared import Prepared, PreparedIn, _dialect_key, change, fetch, first, one, scalar
from seqexport_dagster_tests.support.world import postgres_database

meta = sa.MetaData()
things = sa.Table(
    "things",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(40), nullable=False),
    sa.Column("size", sa.BigInteger),
    sa.Column("flag", sa.Boolean),
    sa.Column("body", sa.LargeBinary),
    sa.Column("status", sa.String(20), nullable=False, server_default="new"),
)
_BY_NAME = sa.select(things).where(things.c.name == sa.bindparam("b_name")).order_by(things.c.id)
_STATUS_NEW = sa.select(things.c.id, things.c.flag).where(things.c.status == "new").order_by(things.c.id).limit(2)
_COUNT = sa.select(sa.func.count(things.c.id).label("n")).where(things.c.flag.is_(True))
_GROW = things.update().where(things.c.name == sa.bindparam("b_name")).values(size=things.c.size + sa.bindparam("b_by"))
_SET = things.update().where(things.c.id == sa.bindparam("b_id"))
_DROP = things.delete().where(things.c.name == sa.bindparam("b_name"))
_OF_NAMES = PreparedIn("b_n", lambda names: sa.select(things.c.name).where(things.c.name.in_(names)).order_by("name"))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path / 'p.db'}")
        meta.create_all(engine)
        yield engine
        engine.dispose()
        return
    with postgres_database() as url:
        engine = create_engine(url)
        meta.create_all(engine)
        yield engine
        engine.dispose()


def _fill(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            things.insert(),
            [
                {"name": "a", "size": 1, "flag": True, "body": b"\x00\x01"},
                {"name": "b", "size": 2**40, "flag": False, "body": None},
                {"name": "a", "size": None, "flag": None, "body": b""},
            ],
        )


def _as_sqlalchemy(engine: sa.Engine, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(statement, params)]


def test_rows_are_those_of_execute_with_their_types(engine: sa.Engine) -> None:
    _fill(engine)
    for statement, params in ((_BY_NAME, {"b_name": "a"}), (_STATUS_NEW, {}), (_COUNT, {})):
        with engine.connect() as conn:
            rows = fetch(conn, Prepared(statement), params)
        expected = _as_sqlalchemy(engine, statement, params)
        assert [tuple(r) for r in rows] == expected and expected
        assert [[type(v) for v in r] for r in rows] == [[type(v) for v in r] for r in expected]
    with engine.connect() as conn:
        row = one(conn, Prepared(_BY_NAME), {"b_name": "b"})
        assert (row.name, row.size, row.flag, row.body) == ("b", 2**40, False, None)
        assert row._mapping["status"] == "new" and row[1] == "b"
        assert isinstance(first(conn, Prepared(_BY_NAME), {"b_name": "a"}).body, bytes)
        assert first(conn, Prepared(_BY_NAME), {"b_name": "zz"}) is None
        assert scalar(conn, Prepared(_COUNT)) == 1
        with pytest.raises(sa.exc.NoResultFound):
            one(conn, Prepared(_BY_NAME), {"b_name": "zz"})
        with pytest.raises(sa.exc.MultipleResultsFound):
            one(conn, Prepared(_BY_NAME), {"b_name": "a"})
        assert [r.name for r in fetch(conn, *_OF_NAMES.bind(["b", "a", "c"], {}))] == ["a", "a", "b"]
        assert [r.name for r in fetch(conn, *_OF_NAMES.bind(["b"], {}))] == ["b"]


def test_changes_count_rows_and_set_the_columns_their_parameters_name(engine: sa.Engine) -> None:
    _fill(engine)
    with engine.begin() as conn:
        assert change(conn, Prepared(_GROW), {"b_name": "a", "b_by": 10, "unused": 1}) == 2
        assert change(conn, Prepared(_SET), {"b_id": 2, "flag": True, "body": b"\xff"}) == 1
        assert change(conn, Prepared(_SET), {"b_id": 3, "status": "old"}) == 1
        assert change(conn, Prepared(_DROP), {"b_name": "nobody"}) == 0
    rows = _as_sqlalchemy(engine, sa.select(things).order_by(things.c.id), {})
    assert rows == [
        (1, "a", 11, True, b"\x00\x01", "new"),
        (2, "b", 2**40, True, b"\xff", "new"),
        (3, "a", None, None, b"", "old"),
    ]
    with engine.begin() as conn:  # a name that is no column is ignored, as conn.execute ignores it
        assert change(conn, Prepared(_SET), {"b_id": 1, "colour": "red", "flag": False}) == 1
    assert _as_sqlalchemy(engine, sa.select(things.c.flag).where(things.c.id == 1), {}) == [(False,)]


def test_a_change_rolls_back_with_its_transaction(engine: sa.Engine) -> None:
    _fill(engine)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        change(conn, Prepared(_DROP), {"b_name": "a"})
        raise RuntimeError("stop")
    assert len(_as_sqlalchemy(engine, sa.select(things), {})) == 3


def test_a_driver_error_leaves_as_sqlalchemy_raises_it(engine: sa.Engine) -> None:
    missing = sa.Table("missing", sa.MetaData(), sa.Column("id", sa.Integer))
    statement = sa.select(missing).where(missing.c.id == sa.bindparam("b_id"))
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as expected:
        conn.execute(statement, {"b_id": 1})
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as raised:
        fetch(conn, Prepared(statement), {"b_id": 1})
    assert type(raised.value) is type(expected.value)
    assert raised.value.statement == expected.value.statement
    _fill(engine)  # the connection went back to the pool usable
    assert len(_as_sqlalchemy(engine, sa.select(things), {})) == 3


def test_listeners_see_every_statement(engine: sa.Engine) -> None:
    """A ``before_cursor_execute`` listener (`support.explain`) gets the statements as SQLAlchemy sends them."""
    _fill(engine)
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", listen)
    try:
        with engine.begin() as conn:
            assert len(fetch(conn, Prepared(_BY_NAME), {"b_name": "a"})) == 2
            assert change(conn, Prepared(_GROW), {"b_name": "b", "b_by": 1}) == 1
    finally:
        sa.event.remove(engine, "before_cursor_execute", listen)
    assert len(seen) == 2 and seen[0].lstrip().startswith("SELECT") and seen[1].lstrip().startswith("UPDATE")


def test_engines_alike_share_a_plan_and_others_do_not(tmp_path: Path) -> None:
    """Each world of the simulator has engines of its own: a statement is compiled once for all
    engines whose dialects are alike, and apart for a dialect with other settings."""
    prepared = Prepared(_BY_NAME)
    engines = [create_engine(f"sqlite:///{tmp_path / f'{n}.db'}") for n in range(2)]
    other = sa.create_engine(f"sqlite:///{tmp_path / 'other.db'}", paramstyle="named")
    plans = []
    for engine in (*engines, other):
        meta.create_all(engine)
        with engine.connect() as conn:
            assert fetch(conn, prepared, {"b_name": "a"}) == []
            plans.append(prepared.plan(conn.dialect, {"b_name": "a"}))
        engine.dispose()
    assert plans[0] is plans[1] and plans[2] is not plans[0]
    assert plans[0].positional and not plans[2].positional


def test_sqlite_and_postgresql_dialects_have_settings_to_compare(engine: sa.Engine) -> None:
    """Every setting of the dialects we run has a value (hashable), so engines alike share plans."""
    with engine.connect() as conn:
        fetch(conn, Prepared(_COUNT))
        assert _dialect_key(conn.dialect) is not None


def test_a_dialect_with_a_setting_without_a_value_shares_no_plan(tmp_path: Path) -> None:
    """A setting that has no value to compare (unhashable) keeps the dialect's plans to itself. Such
    settings were once compared by ``id()``: the second engine's setting here is made at the
    address of the first's, collected just before, and was taken for the same setting."""
    prepared = Prepared(_BY_NAME)
    engines = [create_engine(f"sqlite:///{tmp_path / f'{n}.db'}") for n in range(2)]
    for engine in engines:
        meta.create_all(engine)
    plans, addresses = [], []
    for n, engine in enumerate(engines):
        engine.dialect.made_for = [n]  # type: ignore[attr-defined]
        addresses.append(id(engine.dialect.made_for))  # type: ignore[attr-defined]
        with engine.connect() as conn:
            assert fetch(conn, prepared, {"b_name": "a"}) == []
            plans.append(prepared.plan(conn.dialect, {"b_name": "a"}))
        del engine.dialect.made_for  # type: ignore[attr-defined]
    assert addresses[0] == addresses[1]  # the case this test is about: one address, two settings
    assert plans[0] is not plans[1] and _dialect_key(engines[0].dialect) is None
    with engines[1].connect() as conn:  # its own plan, and still its own
        assert prepared.plan(conn.dialect, {"b_name": "a"}) is plans[1]
    for engine in engines:
        engine.dispose()
