"""Prepared statements: a prebuilt statement compiled once per dialect and run on the DB-API cursor.

SQLAlchemy's execute costs about 30 µs of Python per statement on top of SQLite's own 5 µs (an
execution context, the cache key lookup, parameter and result objects); a run makes thousands of
small control-plane reads and writes, and the simulator's profile spent most of the control plane's
time there (issue 40). `Prepared` keeps what SQLAlchemy would compute on every call, once: the SQL
string, the parameters in the driver's order with their bind processors, and the result columns
with their result processors (SQLite's Boolean, PostgreSQL's bytea), so a call is the cursor's
execute and a loop over the rows.

It is SQLAlchemy's own compilation (same SQL, same processors), within SQLAlchemy's connection and
transaction: the connection is a pooled `sa.Connection` and a driver error is raised and handled
as SQLAlchemy does (`Connection._handle_dbapi_exception`: wrapped as `sa.exc.DBAPIError`, the
connection invalidated on a disconnect). A connection with event listeners (tests that capture
statements, `support.explain`), and any statement this cannot run as compiled (expanding or
post-compile parameters, Python-side defaults, duplicate result names), go through
``conn.execute`` unchanged. Parameters that name no bind are ignored, as SQLAlchemy ignores them
(an UPDATE is compiled with every name as a column key, as ``conn.execute`` compiles it).
"""

from __future__ import annotations

import functools
import keyword
import threading
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect

#: A missing parameter that has no value in the statement (SQLAlchemy raises for it as well).
_REQUIRED: Final = object()


def _mapping(self: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(self._fields, self, strict=True))  # type: ignore[attr-defined]


class _Plan:
    """One statement compiled for one dialect."""

    __slots__ = (
        "sql",
        "names",
        "positional",
        "static",
        "binders",
        "row",
        "keys",
        "processors",
        "usable",
        "result_types",
    )

    def __init__(self, statement: sa.Executable, dialect: Dialect, column_keys: list[str] | None) -> None:
        compiled: Any = statement.compile(dialect=dialect, column_keys=column_keys)  # type: ignore[attr-defined]
        self.sql: str = compiled.string
        self.positional: bool = bool(compiled.positional)
        names = list(compiled.positiontup) if self.positional else list(compiled.binds)
        escaped = getattr(compiled, "escaped_bind_names", None) or {}
        self.names: list[str] = names
        self.keys: list[str] = [escaped.get(n, n) for n in names]
        self.static: dict[str, Any] = {}
        for name, bind in compiled.binds.items():
            self.static[name] = _REQUIRED if bind.required else bind.effective_value
        processors = compiled._bind_processors
        self.binders: list[Callable[[Any], Any] | None] = [processors.get(n) for n in names]
        self.usable = not (
            compiled.literal_execute_params
            or compiled.post_compile_params
            or "POSTCOMPILE" in self.sql
            or any(callable(v) for v in self.static.values())
            or getattr(compiled, "insert_prefetch", None)
            or getattr(compiled, "update_prefetch", None)
            or getattr(compiled, "postfetch", None)
        )
        self.row: Any = None
        self.processors: list[Callable[[Any], Any] | None] | None = None
        self.result_types: list[Any] = []
        result_columns = compiled._result_columns
        if result_columns:
            fields = [c[0] for c in result_columns]
            if len(set(fields)) != len(fields) or any(
                not f.isidentifier() or keyword.iskeyword(f) or f.startswith("_") or hasattr(tuple, f) for f in fields
            ):
                self.usable = False
            else:
                self.row = type("Row", (namedtuple("_Row", fields),), {"__slots__": (), "_mapping": property(_mapping)})
            self.result_types = [c[3] for c in result_columns]

    def parameters(self, params: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        values = []
        for name, binder in zip(self.names, self.binders, strict=True):
            value = params[name] if name in params else self.static[name]
            if value is _REQUIRED:
                raise sa.exc.InvalidRequestError(f"A value is required for bind parameter {name!r}")
            values.append(binder(value) if binder is not None else value)
        if self.positional:
            return tuple(values)
        return dict(zip(self.keys, values, strict=True))

    def result_processors(self, dialect: Dialect, description: Sequence[Any]) -> list[Callable[[Any], Any] | None]:
        if self.processors is None:
            self.processors = [
                t._cached_result_processor(dialect, d[1]) for t, d in zip(self.result_types, description, strict=True)
            ]
        return self.processors


#: Helpers a dialect makes for itself from its settings, and its cache of type implementations:
#: not settings of their own.
_DERIVED: Final = frozenset({"identifier_preparer", "type_compiler", "type_compiler_instance", "_type_memos"})
_DIALECT_KEYS: weakref.WeakKeyDictionary[Dialect, tuple[Any, ...] | None] = weakref.WeakKeyDictionary()


def _dialect_key(dialect: Dialect) -> tuple[Any, ...] | None:
    """Dialects that compile alike: same class and same settings (the values of its attributes;
    a function or a module is its own value, held by the key). Every engine has a dialect of its
    own; the simulator and the tests make one engine per world, and compiling every statement again
    for each cost a few per cent of a seed. Taken once the dialect met its database (a plan is made
    on a connection), when its server version and the like are known.

    None when a setting has no value to compare (an unhashable attribute: a dict, a list): that
    dialect shares no plan. It was once keyed by the attribute's ``id()``, which says nothing of
    its value (the same dict changed since, another settings' dict at the address of a collected
    one) and could have handed one dialect's plan to another. SQLite's and PostgreSQL's dialects
    have no such attribute (`test_prepared`)."""
    if dialect in _DIALECT_KEYS:
        return _DIALECT_KEYS[dialect]
    settings = [(name, value) for name, value in sorted(vars(dialect).items()) if name not in _DERIVED]
    key = _DIALECT_KEYS[dialect] = (type(dialect), tuple(settings)) if all(map(_comparable, settings)) else None
    return key


def _comparable(setting: tuple[str, Any]) -> bool:
    try:
        hash(setting[1])
    except TypeError:
        return False
    return True


class Prepared:
    """A statement built once at import (``Prepared(sa.select(...))``), run with `fetch` or `change`.

    An UPDATE without ``values()`` sets the columns its parameters name (as ``conn.execute`` does):
    it is compiled once per set of parameter names."""

    def __init__(self, statement: sa.Executable) -> None:
        self.statement = statement
        self.sets_named_columns = isinstance(statement, sa.Update)
        #: Plans by `_dialect_key`, shared by the dialects alike.
        self._plans: dict[tuple[Any, ...], dict[frozenset[str], _Plan]] = {}
        #: Plans of the dialects that share none, kept as long as their dialect.
        self._own: weakref.WeakKeyDictionary[Dialect, dict[frozenset[str], _Plan]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._last: tuple[Dialect, frozenset[str], _Plan] | None = None

    def plan(self, dialect: Dialect, params: Mapping[str, Any]) -> _Plan:
        names = frozenset(params) if self.sets_named_columns else frozenset()
        last = self._last  # the one plan nearly every call wants: no lookups
        if last is not None and last[0] is dialect and last[1] == names:
            return last[2]
        key = _dialect_key(dialect)
        found = self._plans.get(key) if key is not None else self._own.get(dialect)
        plan = found.get(names) if found is not None else None
        if plan is None:
            with self._lock:
                plans = self._plans.setdefault(key, {}) if key is not None else self._own.setdefault(dialect, {})
                plan = plans.get(names)
                if plan is None:
                    plan = plans[names] = _Plan(self.statement, dialect, sorted(names) if names else None)
        self._last = (dialect, names, plan)
        return plan


class PreparedIn:
    """A statement with one IN list, prepared for each length of the list: SQLAlchemy renders an
    expanding ``IN`` anew on every call, this renders the same ``IN (?, ?, ..)`` once per length.

    ``build`` gets the list's bind parameters (``<name>_0``, ``<name>_1``, ..); `bind` returns the
    statement for ``values`` and the parameters naming them."""

    def __init__(self, name: str, build: Callable[[list[sa.BindParameter[Any]]], sa.Executable]) -> None:
        self.name = name
        self._prepared = functools.lru_cache(maxsize=128)(
            lambda n: Prepared(build([sa.bindparam(f"{name}_{i}") for i in range(n)]))
        )

    def bind(self, values: Sequence[Any], params: Mapping[str, Any]) -> tuple[Prepared, dict[str, Any]]:
        return self._prepared(len(values)), {**params, **{f"{self.name}_{i}": v for i, v in enumerate(values)}}


def _direct(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any]) -> _Plan | None:
    """The plan to run ``prepared`` on the cursor, or None when it must go through ``conn.execute``."""
    if conn._has_events or conn.engine._has_events:
        return None
    plan = prepared.plan(conn.dialect, params)
    return plan if plan.usable else None


def _run(conn: sa.Connection, plan: _Plan, params: Mapping[str, Any]) -> Any:
    parameters = plan.parameters(params)
    cursor = None
    try:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(plan.sql, parameters)
    except BaseException as exc:
        if cursor is not None:
            cursor.close()
        conn._handle_dbapi_exception(exc, plan.sql, parameters, None, None)
    return cursor


def fetch(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any] | None = None) -> list[Any]:
    """Every row of a prepared SELECT: tuples with the columns as attributes and ``_mapping``,
    as `sa.Row` has them."""
    params = params or {}
    plan = _direct(conn, prepared, params)
    if plan is None or plan.row is None:
        return list(conn.execute(prepared.statement, dict(params)).all())
    cursor = _run(conn, plan, params)
    try:
        raw = cursor.fetchall()
        processors = plan.result_processors(conn.dialect, cursor.description)
    except BaseException as exc:
        cursor.close()
        conn._handle_dbapi_exception(exc, plan.sql, None, None, None)
    cursor.close()
    make = plan.row._make
    if any(processors):
        return [make([p(v) if p is not None else v for p, v in zip(processors, r, strict=True)]) for r in raw]
    return [make(r) for r in raw]


def first(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any] | None = None) -> Any:
    """The first row, or None (``Result.first``)."""
    rows = fetch(conn, prepared, params)
    return rows[0] if rows else None


def one(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any] | None = None) -> Any:
    """Exactly one row (``Result.one``: `sa.exc.NoResultFound` or `MultipleResultsFound` otherwise)."""
    rows = fetch(conn, prepared, params)
    if not rows:
        raise sa.exc.NoResultFound("No row was found when one was required")
    if len(rows) > 1:
        raise sa.exc.MultipleResultsFound("Multiple rows were found when exactly one was required")
    return rows[0]


def scalar(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row, or None (``Result.scalar``)."""
    row = first(conn, prepared, params)
    return None if row is None else row[0]


def change(conn: sa.Connection, prepared: Prepared, params: Mapping[str, Any] | None = None) -> int:
    """Run a prepared UPDATE or DELETE; the rows it matched (``CursorResult.rowcount``)."""
    params = params or {}
    plan = _direct(conn, prepared, params)
    if plan is None or plan.row is not None:
        return int(conn.execute(prepared.statement, dict(params)).rowcount)
    cursor = _run(conn, plan, params)
    count = cursor.rowcount
    cursor.close()
    return int(count)
