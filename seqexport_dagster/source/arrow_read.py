"""A PostgreSQL window read straight into Arrow record batches (ADBC), for Parquet parts: since
2026-12-06 only after what Arrow's CSV reader refuses (`csv_read.py`, the window read, costs ~0.6 CPU-s
per million rows less: ADBC's decoding of binary COPY was the dearer half). `literal` serves both.

``adbc-driver-postgresql`` runs ``COPY (SELECT …) TO STDOUT (FORMAT binary)`` and decodes the stream
into Arrow columns in C: no Python object per value. Measured on 1M email events (benchmarks,
``arrow`` section): 1.6 CPU-s per million rows of the exporter for Arrow batches, against 0.9 for
psycopg2's row tuples plus ~6 to turn those tuples into Arrow columns. The gzip JSONL writer keeps
psycopg2's tuples: msgspec encodes tuples, and no Arrow-to-JSON encoder beats it.

Why the SQL carries its values as literals: with bound parameters the driver executes a prepared
statement and returns the whole result as one batch (a 200k-row window held 294 MB), not a stream.
The values are the account id, two timestamps and a part boundary (a row's ``recorded_at`` and
``id``); each is dollar-quoted with a tag that does not occur in it, which PostgreSQL reads verbatim
whatever ``standard_conforming_strings`` says.

SQLite windows are not read here: ``adbc-driver-sqlite`` embeds its own copy of SQLite, and two copies
in one process on one file do not see each other's locks (reader.py tells what that did with APSW).
`sqlite_read.py` reads them into Arrow through the process's own SQLite instead.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.errors import RetryableError

#: Bytes per Arrow batch the driver aims at: ~4,000 email events; peak memory stays flat whatever the
#: window (16 MB, the driver's default, cost 45 MB more peak on a 1M-row window for no CPU gained).
BATCH_BYTES: Final = 1 << 20


def literal(value: str) -> str:
    """``value`` as a dollar-quoted PostgreSQL string constant, read verbatim (no escapes). The tag is
    one whose closing ``$tag$`` first occurs right after the value (``x$q`` must not take ``$q$``)."""
    if "\x00" in value:
        raise ValueError("a PostgreSQL text value cannot hold NUL")
    n, tag = 0, "q"
    while (value + f"${tag}$").find(f"${tag}$") != len(value):
        n, tag = n + 1, f"q{n}"
    return f"${tag}${value}${tag}$"


def libpq_uri(engine: sa.Engine) -> str:
    """The engine's database as a libpq URI (it may hold a password: never log it)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


def record_batches(engine: sa.Engine, sql: str) -> Iterator[Any]:
    """``sql``'s result as a stream of ``pyarrow.RecordBatch``; a driver error is `RetryableError`
    (its first line, with the password taken out should a driver ever echo it).

    The driver manager's low-level API, not its DB-API module: that one imports ``pyarrow.dataset`` and
    pandas (+54 MB resident, measured), which a window read never uses. The connection comes from the
    engine's `_Connections` and goes back there when the stream was read to its end."""
    import adbc_driver_manager as adbc
    import pyarrow as pa

    connections = _connections(engine)
    password = engine.url.password or ""
    lease: _Lease | None = None
    handles: list[Any] = []  # closed in reverse: statement, reader
    done = False
    try:
        try:
            lease = connections.take()
            try:
                reader = _execute(adbc, pa, lease.conn, sql, handles)
            except adbc.Error:
                if not lease.reused:
                    raise
                # An idle connection the server or the network closed since its last read (a restart,
                # ``idle_session_timeout``): what ``pool_pre_ping`` does for the engine, without a
                # round trip on every read. One fresh connection, then a failure is the source's.
                _close_all(handles)
                handles.clear()
                stale, lease = lease, None
                connections.discard(stale)
                lease = connections.take(fresh=True)
                reader = _execute(adbc, pa, lease.conn, sql, handles)
            yield from reader
            done = True
        except adbc.Error as exc:
            line = (str(exc).strip().splitlines() or ["unknown error"])[0]
            if password:
                line = line.replace(password, "***")
            raise RetryableError(f"source database error: {line}") from None
    finally:
        _close_all(handles)
        # Read to its end, the connection is idle (autocommit: no transaction is left open) and the
        # next read may use it; a stream given up half-way or failed may still be inside its COPY.
        if lease is not None:
            if done:
                connections.give(lease)
            else:
                connections.discard(lease)


def _execute(adbc: Any, pa: Any, conn: Any, sql: str, handles: list[Any]) -> Any:
    statement = adbc.AdbcStatement(conn)
    handles.append(statement)
    statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_BYTES)})
    statement.set_sql_query(sql)
    stream, _ = statement.execute_query()
    reader = pa.RecordBatchReader._import_from_c(stream.address)
    handles.append(reader)
    return reader


def _close_all(handles: list[Any]) -> None:
    for handle in reversed(handles):
        handle.close()


#: Idle connections kept per engine: a run's worker threads (`batch.DEFAULT_WORKERS`) read one window
#: each at a time, and a connection beyond these is closed when its read ends.
IDLE_CONNECTIONS: Final = 8


@dataclass(frozen=True, eq=False)
class _Lease:
    """A connection taken for one read, the ADBC database it belongs to, and whether it was used before
    (an idle one may have been closed by the server since)."""

    conn: Any
    database: Any
    reused: bool


class _Connections:
    """One engine's ADBC database and its idle connections, reused by every window read of the
    process (each run's `SourceReader` is new; the engine is the resource's, so this is shared).

    Why: opening the ADBC database reads PostgreSQL's type catalog into the driver's type resolver,
    measured at 40-70 ms of the exporter's CPU and ~70-150 ms wall per window, more than a 1-minute
    window of ~700 rows costs to read and write (benchmarks/pg_windows.py). A connection is used by
    one read at a time, and only returned when its stream ended (`record_batches`). Closed when the
    engine is disposed (``engine_disposed``: the resource's teardown, a test world's): the idle
    connections at once, the database when its last connection still reading is done (ADBC refuses to
    close a database with an open connection). A forked child opens its own, never the parent's."""

    def __init__(self, uri: str) -> None:
        self._uri = uri
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._database: Any = None
        self._idle: list[_Lease] = []
        self._open: dict[Any, int] = {}  # database -> its connections not closed yet (idle or reading)
        self._retired: set[Any] = set()  # databases of a disposed engine, closed with their last connection

    def take(self, *, fresh: bool = False) -> _Lease:
        """A connection for one read; ``fresh``: a new one, whatever is idle."""
        import adbc_driver_manager as adbc
        import adbc_driver_postgresql

        with self._lock:
            self._after_fork()
            if self._idle and not fresh:
                idle = self._idle.pop()
                return _Lease(idle.conn, idle.database, True)
            if self._database is None:
                self._database = adbc_driver_postgresql.connect(self._uri)
                self._open[self._database] = 0
            database = self._database
            self._open[database] += 1
        try:
            # Autocommit, the ADBC default: one read-only statement per read, no transaction left open.
            return _Lease(adbc.AdbcConnection(database), database, False)
        except BaseException:
            self._closed(database)
            raise

    def give(self, lease: _Lease) -> None:
        with self._lock:
            if lease.database is self._database and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(lease)
                return
        self.discard(lease)

    def discard(self, lease: _Lease) -> None:
        """Close the lease's connection (and its database, if the engine was disposed meanwhile and this
        was its last connection)."""
        try:
            lease.conn.close()
        finally:
            self._closed(lease.database)

    def _closed(self, database: Any) -> None:
        with self._lock:
            if os.getpid() != self._pid or database not in self._open:
                return
            self._open[database] -= 1
            last = database in self._retired and not self._open[database]
            if last:
                self._retired.discard(database)
                del self._open[database]
        if last:
            database.close()

    def close(self, *_: Any) -> None:
        """Close the idle connections and the database (once its connections still reading are done)."""
        with self._lock:
            if os.getpid() != self._pid:
                self._after_fork()
                return
            idle, database = self._idle, self._database
            self._idle, self._database = [], None
            if database is not None:
                self._retired.add(database)
                if not self._open[database]:  # nothing idle nor reading: close it now
                    self._retired.discard(database)
                    del self._open[database]
                    later = False
                else:
                    later = True
        for lease in idle:
            self.discard(lease)
        if database is not None and not later:
            database.close()

    def _after_fork(self) -> None:
        """In a forked child the parent's handles share the parent's sockets: closing them would end
        the parent's sessions, so they are left alone (kept referenced) and this process opens its own."""
        if os.getpid() != self._pid:
            _INHERITED.append((self._database, self._idle, self._open))
            self._pid, self._database, self._idle, self._open, self._retired = os.getpid(), None, [], {}, set()


_INHERITED: list[Any] = []
_BY_ENGINE: weakref.WeakKeyDictionary[sa.Engine, _Connections] = weakref.WeakKeyDictionary()
_BY_ENGINE_LOCK = threading.Lock()


def _connections(engine: sa.Engine) -> _Connections:
    with _BY_ENGINE_LOCK:
        found = _BY_ENGINE.get(engine)
        if found is None:
            found = _BY_ENGINE[engine] = _Connections(libpq_uri(engine))
            sa.event.listen(engine, "engine_disposed", found.close)
        return found
