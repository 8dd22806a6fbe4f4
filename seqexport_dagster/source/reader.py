"""Streaming readers over Sequenzy's tables.

Rows come out as tuples in the contract's field order, ordered by ``(recorded_at, id)`` for events
and by ``id`` for subscribers, in batches, so memory is bounded by the batch size whatever the
window. Timestamps are stored in the contract's text form and JSON fields arrive as text, so the writer
does no per-field work in Python.

Parquet exports read windows as Arrow record batches instead (`window_record_batches`): from
PostgreSQL its CSV COPY parsed by Arrow (`csv_read.py`, with ADBC's binary COPY, `arrow_read.py`, after
the last row for what Arrow's CSV refuses); from SQLite values copied into Arrow's layout in C through
the process's own SQLite (`sqlite_read.py`, with tuples from here after the last row for a value it
does not take as it is). Everything else reads tuples here.

We go below SQLAlchemy's ORM/Core row layer to the DBAPI cursor on purpose: it is the hot path and
Row objects cost more than the whole serialization (DESIGN §9).

Building row tuples in the sqlite3 module is 40 % of the engine's CPU (benchmarks/profile.py). APSW
builds them twice as fast, and we tried it: but its wheel carries its own copy of SQLite, and two
copies of SQLite in one process on one file do not see each other's locks. When APSW closed its
connection, its SQLite believed it was the last one and checkpointed and removed the WAL that
sqlite3's connections were still writing to. A retry then read rows that had been deleted before
it started (test_runner.py::test_stale_parts_are_blanked). SQLite's "How To Corrupt Your Database
Files" §2.3 describes this. We stay on one SQLite.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS, SUBSCRIBERS, Dataset
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.errors import RetryableError, UntypeableValue

Row = tuple[Any, ...]
#: Rows per fetch. Small on purpose: a batch's Python objects (~1.1 kB a row) should stay in the
#: core's L2 cache while they are built, encoded and compressed. Measured on 1M email events
#: (benchmarks/): 500 rows cost ~22 % less CPU than 5,000 on SQLite and use 12 MB less memory.
#: PostgreSQL gets 1,000: each fetch is a network round trip (still ~22 % less CPU than 5,000).
DEFAULT_BATCH = 500
POSTGRES_BATCH = 1_000


def select_list(ds: Dataset, dialect: str) -> str:
    if dialect not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported source database {dialect!r}: use sqlite or postgresql")
    cast = "::text" if dialect == "postgresql" else ""
    return ", ".join(f"{f.name}{cast}" if f.type in ("object", "array") else f.name for f in ds.fields)


class SourceReader:
    """Reads one account's rows. One instance per source database; cheap to keep around."""

    def __init__(self, engine: sa.Engine, batch_size: int | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.batch_size = batch_size or (POSTGRES_BATCH if self.dialect == "postgresql" else DEFAULT_BATCH)
        self._mark = "%s" if engine.dialect.paramstyle in ("format", "pyformat") else "?"

    def window_batches(
        self,
        dataset: str,
        account_id: str,
        window: Window,
        *,
        after: tuple[str, ...] | None = None,
        until: tuple[str, ...] | None = None,
    ) -> Iterator[list[Row]]:
        """The window's rows in ``(recorded_at, id)`` order, optionally only those after the sort key
        ``after`` and up to ``until`` (part boundaries: a retry continues after the last landed one).
        """
        ds = DATASETS[dataset]
        if ds.is_snapshot:
            raise ValueError(f"{dataset} is a snapshot, not a windowed dataset")
        m = self._mark
        where, params = self._range("(recorded_at, id)", after, until)
        sql = (
            f"SELECT {select_list(ds, self.dialect)} FROM {ds.name} "
            f"WHERE account_id = {m} AND recorded_at > {m} AND recorded_at <= {m}{where} "
            f"ORDER BY recorded_at, id"
        )
        return self._stream(sql, (account_id, *_bounds(window), *params), snapshot=False, dataset=ds.name)

    def window_record_batches(
        self, dataset: str, account_id: str, window: Window, *, after: tuple[str, ...] | None = None
    ) -> Iterator[Any]:
        """`window_batches`, as ``pyarrow.RecordBatch`` es where the source reads into Arrow natively
        (PostgreSQL: its CSV COPY parsed by Arrow, `csv_read`; SQLite: values copied into Arrow's
        layout in C, `sqlite_read`), else as row batches; the Parquet writer takes both, and a stream
        that goes on as rows after Arrow batches."""
        ds = DATASETS[dataset]
        if ds.is_snapshot:
            raise ValueError(f"{dataset} is a snapshot, not a windowed dataset")
        if self.dialect == "postgresql":
            return self._postgres_record_batches(ds, account_id, window, after)
        from seqexport_dagster.source import sqlite_read

        if sqlite_read.usable(self.engine):
            return self._sqlite_record_batches(ds, account_id, window, after)
        return self.window_batches(dataset, account_id, window, after=after)

    def _sqlite_record_batches(
        self, ds: Dataset, account_id: str, window: Window, after: tuple[str, ...] | None
    ) -> Iterator[Any]:
        """Through `sqlite_read`; from a value it does not take as it is (`sqlite_read._NotPlain`: a REAL,
        a BLOB, text not UTF-8), the rest of the window as rows after the last row handed over, whose
        checks name the value or accept it (``(recorded_at, id)`` is unique and ordered: no row is
        repeated or skipped)."""
        from seqexport_dagster.source import sqlite_read

        where, params = self._range("(recorded_at, id)", after, None)
        sql = (
            f"SELECT {select_list(ds, self.dialect)} FROM {ds.name} "
            f"WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ?{where} ORDER BY recorded_at, id"
        )
        last = after
        try:
            for batch in sqlite_read.record_batches(self.engine, sql, (account_id, *_bounds(window), *params), ds):
                last = tuple(batch.column(name)[-1].as_py() for name in ds.order_by)
                yield batch
        except sqlite_read._NotPlain:
            pass
        else:
            return
        yield from self.window_batches(ds.name, account_id, window, after=last)

    def _postgres_record_batches(
        self, ds: Dataset, account_id: str, window: Window, after: tuple[str, ...] | None
    ) -> Iterator[Any]:
        """Through CSV (`csv_read`); a column of a type CSV would hide (`csv_read._NotPlainColumns`: say an
        operator's view with a ``numeric``) reads through ADBC's binary COPY (`arrow_read`) instead, and
        what Arrow's CSV reader refuses (``ArrowInvalid``: text not UTF-8) continues through it after
        the last row handed over: ``(recorded_at, id)`` is unique and ordered, so no row is repeated or
        skipped, as when a retry continues after a landed part."""
        import pyarrow as pa

        from seqexport_dagster.source.arrow_read import record_batches
        from seqexport_dagster.source.csv_read import _NotPlainColumns, csv_record_batches

        last = after
        try:
            for batch in csv_record_batches(self.engine, self._postgres_select(ds, account_id, window, last), ds):
                if batch.num_rows:
                    last = tuple(batch.column(name)[-1].as_py() for name in ds.order_by)
                yield batch
        except (pa.ArrowInvalid, _NotPlainColumns):
            pass
        else:
            return
        yield from record_batches(self.engine, self._postgres_select(ds, account_id, window, last))

    def _postgres_select(self, ds: Dataset, account_id: str, window: Window, after: tuple[str, ...] | None) -> str:
        """The window's SELECT with its values as literals (neither COPY nor ADBC's streaming read takes
        parameters: `arrow_read.literal`)."""
        from seqexport_dagster.source.arrow_read import literal

        low, high = (literal(v) for v in _bounds(window))
        where = ""
        if after is not None:
            where = f" AND (recorded_at, id) > ({', '.join(literal(v) for v in after)})"
        return (
            f"SELECT {select_list(ds, self.dialect)} FROM {ds.name} "
            f"WHERE account_id = {literal(account_id)} AND recorded_at > {low} AND recorded_at <= {high}{where} "
            f"ORDER BY recorded_at, id"
        )

    def snapshot_batches(
        self, account_id: str, *, after: tuple[str, ...] | None = None, until: tuple[str, ...] | None = None
    ) -> Iterator[list[Row]]:
        """The account's subscribers ordered by id (after / up to an id), from one consistent read."""
        ds = SUBSCRIBERS
        where, params = self._range("id", after, until)
        sql = (
            f"SELECT {select_list(ds, self.dialect)} FROM {ds.name} WHERE account_id = {self._mark}{where} ORDER BY id"
        )
        return self._stream(sql, (account_id, *params), snapshot=True, dataset=ds.name)

    def ids(self, dataset: str, account_id: str, window: Window | None) -> Iterator[list[str]]:
        """The ids of a window's rows (or of every subscriber), in batches: what late-row detection
        compares with the ids the ledger says were delivered."""
        m = self._mark
        params: tuple[str, ...]
        if window is None:
            sql, params = f"SELECT id FROM {dataset} WHERE account_id = {m}", (account_id,)
        else:
            sql = f"SELECT id FROM {dataset} WHERE account_id = {m} AND recorded_at > {m} AND recorded_at <= {m}"
            params = (account_id, *_bounds(window))
        for batch in self._stream(sql, params, snapshot=window is None, dataset=dataset):
            yield [row[0] for row in batch]

    def ids_of_windows(self, dataset: str, account_id: str, windows: Sequence[Window]) -> dict[Window, list[str]]:
        """The ids of each window's rows, for several windows of one event dataset in one statement
        per `WINDOWS_PER_STATEMENT` (a reconciliation pass checks about 15 windows a dataset: one
        round trip instead of 15; each branch is the same index range read as `ids`)."""
        found: dict[Window, list[str]] = {w: [] for w in windows}
        ordered = list(found)
        m = self._mark
        branch = (
            f"SELECT {{}} AS w, id FROM {dataset} WHERE account_id = {m} AND recorded_at > {m} AND recorded_at <= {m}"
        )
        for start in range(0, len(ordered), WINDOWS_PER_STATEMENT):
            chunk = ordered[start : start + WINDOWS_PER_STATEMENT]
            sql = " UNION ALL ".join(branch.format(i) for i in range(len(chunk)))
            params = tuple(v for w in chunk for v in (account_id, *_bounds(w)))
            for batch in self._stream(sql, params, snapshot=False, dataset=dataset):
                for i, rid in batch:
                    found[chunk[i]].append(rid)
        return found

    def _range(
        self, key: str, after: tuple[str, ...] | None, until: tuple[str, ...] | None
    ) -> tuple[str, tuple[str, ...]]:
        """Row-value comparisons on the sort key (SQLite 3.15+ and PostgreSQL both use the index)."""
        where, params = "", tuple[str, ...]()
        for bound, op in ((after, ">"), (until, "<=")):
            if bound is not None:
                marks = ", ".join([self._mark] * len(bound))
                where += f" AND {key} {op} ({marks})" if len(bound) > 1 else f" AND {key} {op} {self._mark}"
                params += tuple(bound)
        return where, params

    def count_window(self, dataset: str, account_id: str, window: Window) -> int:
        m = self._mark
        sql = f"SELECT count(*) FROM {dataset} WHERE account_id = {m} AND recorded_at > {m} AND recorded_at <= {m}"
        with self._connection() as conn, closing(conn.cursor()) as cur:
            cur.execute(sql, (account_id, *_bounds(window)))
            return int(cur.fetchone()[0])

    def _connection(self) -> Any:
        try:
            return closing(self.engine.raw_connection())
        except sa.exc.OperationalError as exc:
            raise RetryableError(f"source database unavailable: {_first_line(exc)}") from exc

    def _stream(self, sql: str, params: tuple[Any, ...], *, snapshot: bool, dataset: str) -> Iterator[list[Row]]:
        try:
            with self._connection() as conn:
                if self.dialect == "postgresql":
                    yield from self._stream_postgres(conn, sql, params, snapshot=snapshot)
                else:
                    with closing(conn.cursor()) as cur:
                        cur.execute(sql, params)
                        while batch := cur.fetchmany(self.batch_size):
                            yield batch
                conn.rollback()
        except sqlite3.OperationalError as exc:
            if str(exc).startswith(_UNDECODABLE):
                raise self._undecodable(sql, params, dataset) from None
            raise RetryableError(f"source database error: {_first_line(exc)}") from exc
        except _source_errors() as exc:
            raise RetryableError(f"source database error: {_first_line(exc)}") from exc

    def _undecodable(self, sql: str, params: tuple[Any, ...], dataset: str) -> Exception:
        """The row and field of the first text that is not UTF-8 in ``sql``'s result, as
        `UntypeableValue` (the `sqlite3` module's own error names the column and quotes the value,
        which may be personal data, and not the row). Read again as bytes; only on this error path."""
        with self._connection() as conn:
            sqlite = conn.driver_connection
            sqlite.text_factory = bytes
            try:
                with closing(sqlite.execute(sql, params)) as cur:
                    names = [d[0] for d in cur.description]
                    while batch := cur.fetchmany(self.batch_size):
                        for row in batch:
                            for name, value in zip(names, row, strict=True):
                                if isinstance(value, bytes) and not _is_utf8(value):
                                    shown = (
                                        row[0].decode("utf-8", "backslashreplace")
                                        if isinstance(row[0], bytes)
                                        else str(row[0])
                                    )
                                    return UntypeableValue(dataset, shown, name, "text in UTF-8")
            finally:
                sqlite.text_factory = str
        return RetryableError("source database error: a text value was not UTF-8 and is no longer found; read again")

    def _stream_postgres(self, conn: Any, sql: str, params: tuple[Any, ...], *, snapshot: bool) -> Iterator[list[Row]]:
        with closing(conn.cursor()) as plain:
            # One repeatable-read transaction: the snapshot is consistent even if it spans minutes.
            if snapshot:
                plain.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # A named (server-side) cursor streams; a plain psycopg2 cursor would buffer the whole result.
        with closing(conn.cursor(name="seqexport_stream")) as cur:
            cur.itersize = self.batch_size
            cur.execute(sql, params)
            while batch := cur.fetchmany(self.batch_size):
                yield batch


#: Windows per statement of `SourceReader.ids_of_windows` (3 parameters each, far below SQLite's 999).
WINDOWS_PER_STATEMENT: Final = 64


def _bounds(window: Window) -> tuple[str, str]:
    return iso_ms(window.from_ms), iso_ms(window.to_ms)


def _source_errors() -> tuple[type[Exception], ...]:
    """What a read may raise that means the source, not our code: SQLAlchemy's wrappers and, since raw
    DBAPI cursors raise the drivers' own errors, those of the drivers loaded.

    psycopg2 is not imported for this: a process reading SQLite (a worker and its control plane on
    SQLite files, the benchmarks) never loads it, 4 MB resident with its libpq and OpenSSL (measured),
    and a driver that was never loaded raised nothing. Only evaluated when an exception is on its way."""
    errors: tuple[type[Exception], ...] = (sa.exc.DBAPIError, sqlite3.OperationalError, sqlite3.DatabaseError)
    psycopg2 = sys.modules.get("psycopg2")
    if psycopg2 is not None:
        errors += (psycopg2.OperationalError, psycopg2.InterfaceError)
    return errors


#: The start of the `sqlite3` module's error for text that is not UTF-8; the rest quotes the value.
_UNDECODABLE: Final = "Could not decode to UTF-8"


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_line(exc: BaseException) -> str:
    line = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["unknown error"])[0]
    if line.startswith(_UNDECODABLE):  # "... column 'email' with text '<the value>'": never the value
        line = line.split(" with text ", 1)[0]
    return line
