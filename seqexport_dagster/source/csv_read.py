"""A PostgreSQL window read into Arrow record batches through ``COPY … TO STDOUT (FORMAT csv)``, for
Parquet parts: psycopg2 streams PostgreSQL's CSV into a pipe, Arrow's C++ CSV reader makes the columns.

Why not ADBC's binary COPY (`arrow_read.py`), which this replaces for window reads: measured on a
200,000-row window of email events (2026-12-06, docs/performance.md, "Fourth pass"), ADBC cost
1.45-1.65 CPU-s per million rows of the exporter to hand over Arrow batches, while psycopg2 receives
the same COPY in 0.23 (binary or CSV alike) and Arrow parses the CSV in ~0.4-0.5 (this module,
whole: 0.9-1.1 at 1 MB blocks): ADBC's decoder, not the network, was half of the Parquet window's CPU.

What CSV keeps exact:
- a NULL is PostgreSQL's unquoted empty field and an empty string its quoted ``""``; Arrow reads the
  first as null and the second as ``""`` (``quoted_strings_can_be_null=False``), and only the empty
  field is null (``null_values=[""]``: text such as ``NULL`` or ``NA`` stays text);
- quotes are doubled, and values holding a newline are quoted (``newlines_in_values``); no backslash
  escapes in CSV mode; the stream is UTF-8 (``ENCODING 'UTF8'``) and Arrow checks it;
- every column's type is given (``integer`` fields int64, all others text): nothing is inferred.
The batches then go through `delivery.arrow_check` like any Arrow batch, so a value the row path would
refuse is still refused there, by name.

What CSV cannot take, Arrow refuses with ``ArrowInvalid`` (an integer out of int64's range, text that
is not UTF-8): the caller continues the window after the last row handed over, through ADBC
(`reader.py`). A row wider than a block is not one of those: the buffer grows to hold it.

The COPY runs in a thread (psycopg2's ``copy_expert`` pushes into a file; Arrow pulls from one), through
a pipe: memory stays one pipe buffer, one write buffer, one CSV block and one batch. If the consumer stops early,
the COPY is cancelled, the pipe closed and the connection dropped from the pool; a COPY that fails
raises its error where the stream would have ended, so a truncated stream never reads as a short one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import closing
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.errors import RetryableError

#: Bytes of CSV parsed at a time: ~1,200 email events (a wider row takes a block of its own). Measured
#: (peak RSS of the read alone over the process before it, CPU-s per million rows): 256 kB +12 MB 1.19,
#: 512 kB +15 MB 1.12, 1 MB +20 MB 0.90 with jemalloc (`_parse_pool`); with the system allocator
#: +17, +22 and +34 MB.
BLOCK_BYTES: Final = 1 << 19
#: Bytes of CSV per Arrow batch handed over: ~2,500 email events.
BATCH_BYTES: Final = 1 << 20
#: The COPY thread's write buffer in front of the pipe (psycopg2 writes one call per row).
WRITE_BUFFER: Final = 1 << 16
#: PostgreSQL type OIDs whose values psycopg2 hands the row path as they are in CSV: ``str`` for text,
#: varchar and char; ``int`` for int2, int4 and int8. A column of any other type (``numeric``, ``uuid``,
#: ``timestamptz``, an enum…) is read as ADBC reads it, so that the checks see the type the row path sees.
TEXT_TYPES: Final = frozenset({25, 1043, 1042})
INTEGER_TYPES: Final = frozenset({20, 21, 23})
#: How long a cancelled COPY may take to stop before its connection is dropped all the same.
STOP_SECONDS: Final = 30.0


class _NotPlainColumns(Exception):
    """The SELECT has a column whose type CSV would hide (see `TEXT_TYPES`): read it another way. A
    control-flow signal to `source.reader`, never an error anyone sees: private, so it stays here and
    not in `errors.py` (test_error_tree)."""


def csv_record_batches(engine: sa.Engine, select: str, ds: Dataset) -> Iterator[Any]:
    """``select``'s rows (the dataset's fields in order, values as literals: COPY takes no parameters)
    as ``pyarrow.RecordBatch`` es typed as said in the module; a source error is `RetryableError`;
    `_NotPlainColumns` before any batch when a column's type is not one CSV carries as the row path
    reads it (CSV turns every value into text: an integral ``numeric`` would pass as an integer, a
    ``uuid`` as text, where the row path refuses a ``Decimal`` or a ``UUID``)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    types = {f.name: pa.int64() if f.type == "integer" else pa.string() for f in ds.fields}
    copy_sql = f"COPY ({select}) TO STDOUT (FORMAT csv, ENCODING 'UTF8')"
    read_options = pcsv.ReadOptions(use_threads=False, block_size=BLOCK_BYTES, column_names=list(ds.field_names))
    parse_options = pcsv.ParseOptions(newlines_in_values=True)
    convert_options = pcsv.ConvertOptions(
        column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False, null_values=[""]
    )
    try:
        conn = engine.raw_connection()
    except _driver_errors() as exc:
        raise RetryableError(f"source database unavailable: {_first_line(exc)}") from None
    try:
        plain = _plain_columns(conn, select, ds)
        read_fd, write_fd = os.pipe()
    except BaseException as exc:
        if isinstance(exc, _driver_errors()):
            conn.invalidate()  # the server may have dropped it: not back to the pool
            raise RetryableError(f"source database error: {_first_line(exc)}") from None
        conn.close()
        raise
    if not plain:
        conn.close()
        os.close(read_fd)
        os.close(write_fd)
        raise _NotPlainColumns(select)
    failure: list[BaseException] = []

    def copy() -> None:
        try:
            with os.fdopen(write_fd, "wb", buffering=WRITE_BUFFER) as out, closing(conn.cursor()) as cur:
                cur.copy_expert(copy_sql, out)
        except BaseException as exc:  # handed to the reader, raised where the stream ends
            failure.append(exc)

    thread = threading.Thread(target=copy, name="seqexport-copy", daemon=True)
    pool = _parse_pool(pa)
    ended = False
    try:
        _widen(write_fd)
        try:
            thread.start()
        except BaseException:
            os.close(write_fd)  # else the thread's to close
            raise
        gathered: list[Any] = []
        size = 0
        for block in _row_blocks(read_fd, thread, failure):
            # Blocks parsed one at a time (`BLOCK_BYTES` tells why that size): Arrow's streaming reader
            # over the pipe read up to 32 blocks ahead on an IO thread (+63 MB peak at 1 MB blocks).
            # Batches are gathered to ~`BATCH_BYTES`: the writer's checks cost per batch, and ADBC's
            # batches were that size too.
            read_options.block_size = max(BLOCK_BYTES, len(block) + 1)
            table = pcsv.read_csv(
                pa.BufferReader(block),
                read_options=read_options,
                parse_options=parse_options,
                convert_options=convert_options,
                memory_pool=pool,
            )
            gathered.extend(table.to_batches())
            size += len(block)
            if size >= BATCH_BYTES:
                yield _joined(pa, gathered)
                gathered, size = [], 0
        if gathered:
            yield _joined(pa, gathered)
        ended = True
    except _driver_errors() as exc:
        raise RetryableError(f"source database error: {_first_line(exc)}") from None
    finally:
        _finish(conn, thread, read_fd, ended=ended and not failure)


def _plain_columns(conn: Any, select: str, ds: Dataset) -> bool:
    """Whether every column of ``select`` has a type CSV carries as the row path reads it (one planned,
    unexecuted statement: ``LIMIT 0``)."""
    with closing(conn.cursor()) as cur:
        cur.execute(f"SELECT * FROM ({select}) AS window_rows LIMIT 0")
        kinds = [column.type_code for column in cur.description]
    conn.rollback()
    allowed = [INTEGER_TYPES if f.type == "integer" else TEXT_TYPES for f in ds.fields]
    return len(kinds) == len(allowed) and all(k in a for k, a in zip(kinds, allowed, strict=True))


def _parse_pool(pa: Any) -> Any:
    """Where the CSV parser allocates: jemalloc where pyarrow has it. The process's default is the
    system allocator (`parquet_writer.use_system_allocator`), which kept 7-14 MB more resident for the
    parser's block-sized buffers (glibc's mmap threshold grows with them); the columns parsed are
    freed once their row group is written."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:
        return pa.default_memory_pool()


def _joined(pa: Any, batches: list[Any]) -> Any:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _row_blocks(fd: int, copy: threading.Thread, failure: list[BaseException]) -> Iterator[memoryview]:
    """The pipe's CSV in blocks of whole rows, about `BLOCK_BYTES` each, read into one buffer reused for
    every block (the caller is done with a block before asking for the next; Arrow copies the values
    out). A row ends at a newline outside quotes: a block starts where a row starts, so a newline ends
    a row when the quotes before it in the block are even in number (a quote inside a value is
    doubled). At the end of the stream the COPY's own error if it failed, never a silent end: a
    truncated last row is never handed over."""
    buffer = bytearray(2 * BLOCK_BYTES)
    view = memoryview(buffer)
    held = 0  # bytes of a row not yet ended, kept at the buffer's start
    while True:
        want = held + BLOCK_BYTES
        if want > len(buffer):  # a row wider than a block: a wider buffer (a new one: views pin this one)
            buffer = buffer + bytearray(want - len(buffer))
            view = memoryview(buffer)
        got = held
        end = False
        while got < want:
            n = os.readv(fd, [view[got:want]])
            if not n:
                end = True
                break
            got += n
        if end:
            copy.join()
            if failure:
                raise failure[0]
            if got:
                yield view[:got]
            return
        cut = got
        while (cut := buffer.rfind(b"\n", 0, cut)) >= 0:
            if buffer.count(b'"', 0, cut) % 2 == 0:
                yield view[: cut + 1]
                held = got - cut - 1
                buffer[:held] = bytes(view[cut + 1 : got])  # may overlap: copied first
                break
        else:  # no row ends in the block (one row wider than it): read on
            held = got


def _widen(fd: int) -> None:
    """The pipe's buffer to one block where Linux allows it (``F_SETPIPE_SZ``): fewer wake-ups each way."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), BLOCK_BYTES)
    except OSError:  # over /proc/sys/fs/pipe-max-size: the default 64 kB buffer works too
        pass


def _finish(conn: Any, thread: threading.Thread, read_fd: int, *, ended: bool) -> None:
    """Back to the pool after a COPY read to its end; else the COPY cancelled and the connection dropped."""
    if not ended and thread.is_alive():
        try:
            conn.dbapi_connection.cancel()
        except Exception:  # best effort: closing the pipe stops the writer as well
            pass
    os.close(read_fd)  # a writer still writing gets EPIPE
    if thread.ident is not None:  # started
        thread.join(STOP_SECONDS)
    if ended and not thread.is_alive():
        conn.rollback()
        conn.close()
    else:
        conn.invalidate()


def _driver_errors() -> tuple[type[BaseException], ...]:
    import psycopg2

    return (psycopg2.Error, sa.exc.DBAPIError)


def _first_line(exc: BaseException) -> str:
    return (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["unknown error"])[0]
