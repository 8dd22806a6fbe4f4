"""A SQLite window read straight into Arrow record batches, for Parquet parts.

The `sqlite3` module makes a tuple and a Python object per value: 2.2-2.6 CPU-s per million email
events, more than DuckDB's whole read and Parquet write of the same window (docs/performance.md).
`_sqlite_columns` (C, built by setup.py) steps the same statement and copies each value into Arrow's
layout directly; the Parquet writer then checks the columns (`arrow_check`) and writes the same bytes
as from rows (test_sqlite_read.py).

**One SQLite per process.** The C module links no SQLite: it is handed the addresses of the functions
of the library that Python's own ``_sqlite3`` module calls (looked up with ctypes in that module's
scope), so its connections and the `sqlite3` module's are one library's and see each other's locks.
APSW and ``adbc-driver-sqlite`` were ruled out for carrying a second copy (source/reader.py). When
those functions cannot be found (a Python whose ``_sqlite3`` hides them) or the module was not built
(no C compiler at install), `usable` says no and windows are read as rows, as before.

**What it does not convert.** Each value's storage class must be the column's: TEXT or NULL for
text fields, INTEGER or NULL for integer fields, and text must be strict UTF-8 (what the `sqlite3`
module decodes). At the first row that is not, the read stops before that row (`_NotPlain`) and the
caller reads the rest of the window as rows after the last row handed over, where `values.RowChecker`
names the row and field or accepts the rows as it always did.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
import sqlalchemy as sa

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.errors import RetryableError

#: Rows per batch, at most: one Parquet row group (`parquet_writer.ROW_GROUP`), so a group is one slice
#: of one batch. Fewer once a batch holds `MAX_BYTES` of text (a window of long values stays bounded).
MAX_ROWS: Final = 5_000
MAX_BYTES: Final = 8 << 20
#: What `store.database.create_engine` gives SQLite connections (``PRAGMA busy_timeout=30000``).
BUSY_TIMEOUT_MS: Final = 30_000


class _NotPlain(Exception):
    """The read stopped before a value it does not take as it is (see the module): read on as rows."""


_module: Any = None
_module_lock = threading.Lock()
_UNAVAILABLE: Final = object()


def _bound() -> Any:
    """The C module bound to the process's SQLite, or None (not built, or no such functions)."""
    global _module
    with _module_lock:
        if _module is None:
            _module = _bind() or _UNAVAILABLE
        return None if _module is _UNAVAILABLE else _module


def _bind() -> Any:
    try:
        import _sqlite3

        from seqexport_dagster.source import _sqlite_columns  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        # dlopen of a loaded library returns its handle; dlsym on it searches that module and the
        # libraries it was linked with: the functions `sqlite3` itself calls.
        library = ctypes.CDLL(_sqlite3.__file__)
        addresses = tuple(
            ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in _sqlite_columns.FUNCTIONS
        )
    except (AttributeError, OSError):
        return None
    if not all(addresses):
        return None
    _sqlite_columns.bind(addresses)
    return _sqlite_columns


def database_path(engine: sa.Engine) -> str | None:
    """The SQLite file ``engine`` reads, when a connection of its own would see the same database: a
    plain file URL without query options (``mode=``, ``uri=``, ``cache=shared`` change what a
    connection opens). None for anything else, an in-memory database included."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.query:
        return None
    if url.database in (None, "", ":memory:") or url.database.startswith("file:"):
        return None
    return url.database


def usable(engine: sa.Engine) -> bool:
    return database_path(engine) is not None and _bound() is not None


def record_batches(
    engine: sa.Engine, sql: str, params: Sequence[str], ds: Dataset, *, timeout_ms: int = BUSY_TIMEOUT_MS
) -> Iterator[pa.RecordBatch]:
    """``sql``'s rows (the dataset's fields, in order) as record batches of text and int64 columns,
    read on a read-only connection of its own; `_NotPlain` after the last batch it could read as is.
    A SQLite error is a `RetryableError`, as from the row read."""
    module = _bound()
    path = database_path(engine)
    if module is None or path is None:
        raise RuntimeError("the SQLite column reader is not usable here: check `usable` first")
    kinds = "".join("i" if f.type == "integer" else "s" for f in ds.fields)
    schema = pa.schema([pa.field(f.name, pa.int64() if f.type == "integer" else pa.string()) for f in ds.fields])
    try:
        reader = module.Reader(path, sql, tuple(params), kinds, timeout_ms)
    except module.SourceError as exc:
        raise RetryableError(f"source database error: {_message(exc)}") from None
    try:
        while True:
            try:
                rows, columns, state = reader.fetch(MAX_ROWS, MAX_BYTES)
            except module.SourceError as exc:
                raise RetryableError(f"source database error: {_message(exc)}") from None
            if rows:
                yield pa.RecordBatch.from_arrays(
                    [_array(kind, rows, buffers) for kind, buffers in zip(kinds, columns, strict=True)], schema=schema
                )
            if state == "done":
                return
            if state == "not plain":
                raise _NotPlain()
    finally:
        reader.close()


def _array(kind: str, rows: int, buffers: tuple[bytes | None, ...]) -> pa.Array:
    validity = None if buffers[0] is None else pa.py_buffer(buffers[0])
    if kind == "s":
        return pa.Array.from_buffers(pa.string(), rows, [validity, pa.py_buffer(buffers[1]), pa.py_buffer(buffers[2])])
    return pa.Array.from_buffers(pa.int64(), rows, [validity, pa.py_buffer(buffers[1])])


def _message(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else "unknown error"
    return (text.strip().splitlines() or ["unknown error"])[0]
