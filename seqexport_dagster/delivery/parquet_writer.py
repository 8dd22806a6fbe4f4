"""Rows to Parquet parts of at most 50,000 rows, zstd-compressed, typed from `schema.py`.

The Arrow schema is generated from the one row contract (`arrow_schema`), so the Parquet files, their
published schema (`schema_publish`) and the warehouse DDL cannot drift apart:

- ``timestamp`` fields are ``timestamp[ms, tz=UTC]``: the source keeps them in the contract's text form
  (``2026-09-30T12:34:56.789Z``), parsed over a whole column at once in NumPy (`_timestamps` from
  rows, `arrow_check` from Arrow batches: the same arithmetic, `epoch_millis`);
- ``integer`` fields are ``int64``; ``array`` fields (tags) are ``list<string>``;
- ``object`` fields (``properties``, ``attributes``) are JSON text in a ``string`` column, exactly the
  bytes the JSONL files carry (both re-encoded by `values.RowChecker`, which checks every batch first): every warehouse loads a string, and each parses JSON with its own function
  (``PARSE_JSON``, ``JSON_EXTRACT``, ``json_extract``). A typed struct would need one shape for every
  account's free-form keys, which no warehouse agrees on.

Rows are gathered into row groups of `ROW_GROUP` rows counted from the start of each part; each group
becomes one Arrow record batch (columns built `PIECE` rows at a time by whole-column calls from the
driver's values, `_strings` and `_timestamps`, then joined: no Python object per value beyond what
the driver already made, and never through ``pa.array``, which imports pandas) and is streamed into
the part's file. Output is deterministic: the same rows give byte-identical files (a part of unknown
outcome is re-sent with the same content). Memory is bounded by one row group's Arrow columns (~3 MB
for email events), at most ``PIECE`` + one fetch of source tuples (~2 MB), the part's ids and its
compressed body.

From PostgreSQL and SQLite the rows arrive as Arrow record batches instead (`source/csv_read.py`,
ADBC's `source/arrow_read.py` after what that cannot read; `source/sqlite_read.py`, with row batches
after a value it does not take as it is): they are
checked per column (`arrow_check.py`) and sliced into the same row groups, with no Python object per
value, and the file's bytes are the same as from rows (test_arrow_parquet.py).
"""

from __future__ import annotations

import io
import itertools
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from typing import Any, Final

# Before pyarrow's first import, which reads it once: see `use_system_allocator`.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

import msgspec
import numpy as np
import pyarrow as pa
from pyarrow._parquet import ParquetWriter

from seqexport_dagster.contract.schema import Dataset, Field
from seqexport_dagster.delivery.timestamp_text import civil_fields, epoch_millis
from seqexport_dagster.delivery.values import RowChecker
from seqexport_dagster.delivery.writer import PART_LIMIT, Part, SortKey
from seqexport_dagster.errors import InvalidInput

COMPRESSION: Final = "zstd"
#: zstd level 3, the library's default: level 1 measured no faster on these columns.
COMPRESSION_LEVEL: Final = 3
TIMESTAMP: Final = pa.timestamp("ms", tz="UTC")

_ARROW_TYPES: Final[dict[str, pa.DataType]] = {
    "string": pa.string(),
    "timestamp": TIMESTAMP,
    "integer": pa.int64(),
    "object": pa.string(),
    "array": pa.list_(pa.string()),
}


def arrow_type(f: Field) -> pa.DataType:
    return _ARROW_TYPES[f.type]


@cache
def arrow_schema(ds: Dataset) -> pa.Schema:
    """The Parquet schema of a dataset: every contract field, in order, nullable as the contract says."""
    fields = [pa.field(f.name, arrow_type(f), nullable=f.nullable) for f in ds.fields]
    return pa.schema(fields, metadata={b"sequenzy.dataset": ds.name.encode()})


def _strings(values: Sequence[Any]) -> pa.Array:
    """A string column from Python strings (or ``None``), its buffers made by whole-column C calls:
    one join, one encode, the lengths through ``map`` (ASCII text; wider text is encoded value by
    value, still through ``map``); 1.5-4x faster than ``pa.lib.StringBuilder``,
    which makes a ``bytes`` and then a C++ string of each value in a Python-level call per value.
    Never ``pa.array``: for a Python list it first asks whether pandas is installed and imports it
    (+55 MB resident, ~0.2 CPU-s per process) to check for a pandas object."""
    n = len(values)
    validity = None
    present = values
    if None in values:
        present = [v for v in values if v is not None]
        if 4 * len(present) < 3 * n:  # over a quarter nulls, which the builder appends cheaply: faster
            return _built(values)
        kept = np.fromiter(map(operator.is_not, values, itertools.repeat(None)), dtype=np.bool_, count=n)
        validity = pa.py_buffer(np.packbits(kept, bitorder="little"))
    try:
        ascii_only = all(map(str.isascii, present))  # stops at the first wider value
    except TypeError:  # not all text (checked rows always are): the builder's conversions and errors
        return _built(values)
    if ascii_only:  # one byte a character: the lengths in characters are the lengths in bytes
        lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
        data = "".join(present).encode("ascii")
    else:  # each value encoded apart (``map``): 94 ns a value against the builder's 148, measured;
        # joining text of mixed widths first costs more than that
        try:
            encoded = list(map(str.encode, present))
        except UnicodeEncodeError:  # a lone surrogate: the builder's own error
            return _built(values)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        data = b"".join(encoded)
    if len(data) > _MAX_OFFSET:  # past int32 offsets (a 5,000-row group never is): Arrow's own error
        return _built(values)
    offsets = np.zeros(n + 1, dtype=np.int32)
    if validity is None:
        np.cumsum(lengths, out=offsets[1:])
    else:  # a null takes no bytes: its offset repeats the one before
        spread = np.zeros(n, dtype=np.int64)
        spread[kept] = lengths
        np.cumsum(spread, out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def _built(values: Sequence[Any]) -> pa.Array:
    builder = pa.lib.StringBuilder()
    builder.append_values(values)
    return builder.finish()


_MAX_OFFSET: Final = 2**31 - 1
_TIMESTAMP_WIDTH: Final = len("2026-09-30T12:34:56.789Z")


def _timestamps(values: Sequence[Any]) -> pa.Array:
    """A ``timestamp[ms, UTC]`` column from the contract's text form, parsed in NumPy over the whole
    column: the same values as Arrow's cast of the text, without loading ``pyarrow.compute`` (+12 MB
    resident) on the row path. Only for values `values.RowChecker` accepted: each is exactly
    ``YYYY-MM-DDTHH:MM:SS.sssZ`` and a real instant of years 0001-9999."""
    n = len(values)
    nulls = np.fromiter((v is None for v in values), dtype=np.bool_, count=n) if None in values else None
    texts = values if nulls is None else ["0001-01-01T00:00:00.000Z" if v is None else v for v in values]
    text = np.frombuffer("".join(texts).encode("ascii"), dtype=np.uint8).reshape(n, _TIMESTAMP_WIDTH)
    millis = epoch_millis(*civil_fields(text))
    validity = None if nulls is None else _validity(nulls)
    return pa.Array.from_buffers(TIMESTAMP, n, [validity, pa.py_buffer(millis)])


def _validity(nulls: np.ndarray[Any, Any]) -> pa.Buffer | None:
    """Arrow's validity bitmap (1 = present, least significant bit first), or none when nothing is null."""
    return pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None


def _integers(values: Sequence[Any]) -> pa.Array:
    # From buffers: ``pa.array`` on a NumPy array also looks for pandas (see `_strings`).
    n = len(values)
    data = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=n)
    nulls = np.fromiter((v is None for v in values), dtype=np.bool_, count=n)
    return pa.Array.from_buffers(pa.int64(), n, [_validity(nulls), pa.py_buffer(data)])


def _column_builder(f: Field) -> Callable[[Sequence[Any]], pa.Array]:
    if f.type == "timestamp":  # the contract's text form, parsed over the whole column
        return _timestamps
    if f.type == "integer":
        return _integers
    if f.type == "array":
        decode = msgspec.json.Decoder(list[str]).decode
        kind = pa.list_(pa.string())

        def tags(values: Sequence[Any]) -> pa.Array:
            lists = [None if v is None else decode(v) for v in values]
            offsets = np.zeros(len(lists) + 1, dtype=np.int32)
            np.cumsum([0 if x is None else len(x) for x in lists], out=offsets[1:])
            flat = _strings([tag for x in lists if x is not None for tag in x])
            nulls = np.fromiter((x is None for x in lists), dtype=np.bool_, count=len(lists))
            buffers = [_validity(nulls), pa.py_buffer(offsets)]
            return pa.Array.from_buffers(kind, len(lists), buffers, children=[flat])

        return tags
    return _strings  # strings, and objects as their JSON text


#: Rows per row group, a fixed count from the start of the part: the file's bytes depend on the part's
#: rows only, never on how the source batched them (a part re-sent after an unknown outcome is re-cut
#: from differently sized batches and must be byte-identical), and at most this many rows are held
#: in Python and in Arrow at once (peak memory does not grow with the part or the window).
ROW_GROUP: Final = 5_000
#: Rows turned into Arrow columns at a time inside a row group (`ParquetPartWriter._row_parts`): the
#: pieces are joined before the group is written, so this changes memory and CPU, never the bytes.
PIECE: Final = 1_000


class _PartFile:
    """One part being written: row groups streamed into an in-memory Parquet file."""

    def __init__(self, schema: pa.Schema) -> None:
        # A BytesIO, not ``pa.BufferOutputStream``: that one grows by doubling and ``bytes()`` of its
        # buffer is one more copy of the part (measured: 5 MB more peak on email events, same bytes).
        self.sink = io.BytesIO()
        # pyarrow's own writer class, below ``pyarrow.parquet.ParquetWriter``: that module imports
        # ``pyarrow.fs`` and with it the S3, GCS, Azure and HDFS filesystems (+13 MB resident,
        # measured), which writing to a BytesIO never uses. The arguments are the ones the wrapper
        # passes for these settings (pyarrow 26), and the bytes are the same
        # (test_parquet.py::test_part_bytes_match_pyarrow_parquet_writer).
        self.writer = ParquetWriter(
            self.sink,
            schema,
            version="2.6",
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            # Measured (benchmarks, parquet section): without dictionaries zstd alone makes these
            # columns ~20 % smaller and the write ~25 % faster.
            use_dictionary=False,
            write_statistics=True,
            use_deprecated_int96_timestamps=False,
            writer_engine_version="V2",
            data_page_version="1.0",
            store_schema=True,
        )

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_table(pa.Table.from_batches([batch]), row_group_size=ROW_GROUP)

    def close(self) -> bytes:
        self.writer.close()
        return self.sink.getvalue()


def use_system_allocator() -> None:
    """Arrow's default allocator (mimalloc) keeps what it freed: measured on a 1.5M-row window the
    engine peaked at 197 MB with it and 150 MB with the system allocator, at the same CPU.

    Two defaults: pyarrow's (what ``pa.array`` and builders use), set here once by the first writer,
    and the C++ library's own, which the Parquet writer's column writers use whatever pool is passed,
    and which Arrow reads from ``ARROW_DEFAULT_MEMORY_POOL`` once, when pyarrow is first imported. This
    module sets that variable before importing pyarrow (an operator's own value wins): measured, the
    first row group then costs 0 MB of resident memory instead of 16 MB of mimalloc's arena, at the
    same CPU. A process that imported pyarrow before this module keeps mimalloc there."""
    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


@cache
def empty_parquet(ds: Dataset) -> bytes:
    """A valid Parquet file of the dataset's schema with no rows (a window without rows is part 0000)."""
    use_system_allocator()
    schema = arrow_schema(ds)
    # Built from empty columns, not ``schema.empty_table()``, which imports pandas (see `_strings`).
    empty = pa.RecordBatch.from_arrays([_column_builder(f)([]) for f in ds.fields], schema=schema)
    part = _PartFile(schema)
    part.write(empty)
    return part.close()


def _contiguous(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One row group's slices as one batch of contiguous columns: the writer's pages then depend on
    the rows alone, never on where the source's batches happened to end."""
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


class ParquetPartWriter:
    """Splits a stream of row batches into Parquet parts (the `writer.PartWriter` interface)."""

    def __init__(self, ds: Dataset, part_limit: int = PART_LIMIT) -> None:
        if not 1 <= part_limit <= PART_LIMIT:
            raise InvalidInput("part_limit", f"{part_limit} is outside 1..{PART_LIMIT}")
        use_system_allocator()
        self.dataset = ds
        self.part_limit = part_limit
        self.schema = arrow_schema(ds)
        self._check = RowChecker(ds)
        self._columns = [_column_builder(f) for f in ds.fields]
        names = ds.field_names
        self._id_at = names.index("id")
        self._key_at = key_at = [names.index(name) for name in ds.order_by]
        self._key: Callable[[Sequence[Any]], SortKey] = lambda row: tuple(row[i] for i in key_at)
        self._arrow_check: Callable[[Any], pa.RecordBatch] | None = None

    def _batch(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True))
        return pa.RecordBatch.from_arrays(
            [build(col) for build, col in zip(self._columns, columns, strict=True)], schema=self.schema
        )

    def parts(self, batches: Iterable[Sequence[Any]], *, first: int = 0, empty: bool = True) -> Iterator[Part]:
        """Yield parts numbered from ``first``; ``empty`` as in `writer.PartWriter.parts`.

        ``batches`` are row batches, or ``pyarrow.RecordBatch`` es read natively by the source
        (`SourceReader.window_record_batches`); both give the same bytes for the same rows."""
        stream = iter(batches)
        head = next(stream, None)
        rest = stream if head is None else itertools.chain((head,), stream)
        if isinstance(head, pa.RecordBatch):
            yield from self._arrow_parts(rest, first, empty)
        else:
            yield from self._row_parts(rest, first, empty)

    def _arrow_parts(self, batches: Iterable[Any], first: int, empty: bool) -> Iterator[Part]:
        """`parts` from Arrow batches: checked per column (`arrow_check`), sliced into the same row
        groups as rows are (a fixed count from the start of each part), never as Python rows. Row
        batches after them (a source that went on as rows) are checked and built as on the row path."""
        if self._arrow_check is None:
            # Imported here: pyarrow.compute costs ~9 MB resident, and rows from SQLite never need it.
            from seqexport_dagster.delivery.arrow_check import ArrowChecker

            self._arrow_check = ArrowChecker(self.dataset, self.schema, self._columns, self._batch)
        check = self._arrow_check
        number = first
        group: list[pa.RecordBatch] = []
        in_group = rows_in_part = 0
        ids: list[str] = []
        last: SortKey | None = None
        part: _PartFile | None = None
        for raw in batches:
            batch = check(raw)
            start, n = 0, batch.num_rows
            while start < n:
                take = min(n - start, self.part_limit - rows_in_part, ROW_GROUP - in_group)
                piece = batch.slice(start, take)
                group.append(piece)
                ids.extend(piece.column(self._id_at).to_pylist())
                # The key from the source's text (the checked batch holds parsed timestamps).
                if isinstance(raw, pa.RecordBatch):
                    last = tuple(raw.column(i)[start + take - 1].as_py() for i in self._key_at)
                else:  # rows after Arrow batches (`SourceReader.window_record_batches`)
                    last = self._key(raw[start + take - 1])
                in_group += take
                rows_in_part += take
                start += take
                if in_group == ROW_GROUP or rows_in_part == self.part_limit:
                    part = part or _PartFile(self.schema)
                    part.write(_contiguous(group))
                    group, in_group = [], 0
                if rows_in_part == self.part_limit and part is not None:
                    yield Part(number, part.close(), rows_in_part, tuple(ids), last)
                    number += 1
                    rows_in_part, ids, part = 0, [], None
        if group:
            part = part or _PartFile(self.schema)
            part.write(_contiguous(group))
        if part is not None:
            yield Part(number, part.close(), rows_in_part, tuple(ids), last)
        elif empty and number == first:
            yield Part(number, empty_parquet(self.dataset), 0, (), None)

    def _row_parts(self, batches: Iterable[Sequence[Any]], first: int, empty: bool) -> Iterator[Part]:
        """`parts` from row batches. A row group's rows become Arrow columns `PIECE` rows at a time
        and the pieces are joined into contiguous columns when the group is full (`_contiguous`): the
        same arrays, so the same bytes, as building the group's columns at once, while no more than
        a piece of rows is held as Python objects (a full group of email events is ~6.5 MB of them,
        its Arrow columns ~3 MB)."""
        number = first
        pending: list[Sequence[Any]] = []  # rows not yet in Arrow
        pieces: list[pa.RecordBatch] = []  # the row group's rows already in Arrow
        in_group = 0
        ids: list[str] = []
        rows_in_part = 0
        last: SortKey | None = None
        id_at = self._id_at
        part: _PartFile | None = None
        for batch in map(self._check, batches):
            start = 0
            while start < len(batch):
                take = min(len(batch) - start, self.part_limit - rows_in_part, ROW_GROUP - in_group)
                piece = batch[start : start + take] if (start or take < len(batch)) else batch
                pending.extend(piece)
                ids.extend([row[id_at] for row in piece])
                last = self._key(piece[-1])
                in_group += take
                rows_in_part += take
                start += take
                if len(pending) >= PIECE:
                    pieces.append(self._batch(pending))
                    pending = []
                if in_group == ROW_GROUP or rows_in_part == self.part_limit:
                    if pending:
                        pieces.append(self._batch(pending))
                    part = part or _PartFile(self.schema)
                    part.write(_contiguous(pieces))
                    pending, pieces, in_group = [], [], 0
                if rows_in_part == self.part_limit and part is not None:
                    yield Part(number, part.close(), rows_in_part, tuple(ids), last)
                    number += 1
                    rows_in_part, ids, part = 0, [], None
        if pending:
            pieces.append(self._batch(pending))
        if pieces:
            part = part or _PartFile(self.schema)
            part.write(_contiguous(pieces))
        if part is not None:
            yield Part(number, part.close(), rows_in_part, tuple(ids), last)
        elif empty and number == first:
            yield Part(number, empty_parquet(self.dataset), 0, (), None)
