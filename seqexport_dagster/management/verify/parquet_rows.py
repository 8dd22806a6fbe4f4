"""Parquet parts read back as the rows of the published contract, for the same checks as JSONL.

A part must carry exactly the Arrow schema generated from `schema.py` (names, order, types); its rows
are then given in the JSON form the row checks know (timestamps as ``…Z`` text, objects decoded), so
order, window bounds, duplicates and the schema's enums are checked once for both formats.

Bounded like the JSONL path (`verify.bounds`), because the footer is the customer's bucket talking
and a 21 KB file may claim a million rows (issue 41: ``read().to_pylist()`` of one took 777 MB, a
6 M-row one ran out of memory, a 31 KB zstd file claiming 944 MB took 2.96 GB):

- the footer is read first, and a part is refused unread when it claims more rows than the part
  limit (``too_many_lines``), more than ``max_decompressed_bytes`` in all, or more than
  `MAX_ROW_GROUP_BYTES` in one row group (``too_large``; the writer's row groups are 5,000 rows,
  a few MB);
- rows are then read one row group at a time, in batches of at most `BATCH_ROWS` rows sized so a
  batch holds about `BATCH_BYTES` by the footer's count. Text columns are read as dictionaries
  where the file has them, so a value repeated on every row (a 7 KB file whose 900 rows each hold
  the same 1 MiB string: 944 MB once expanded, while its footer claims 1 MB) stays one value; each
  row's size is computed on the Arrow columns before any row becomes Python objects, and a row past
  ``max_line_bytes`` (the JSONL line bound) or a part past ``max_decompressed_bytes`` is
  ``too_large``; rows become Python objects about `BATCH_BYTES` at a time and are handed on one by
  one.

What stays outside these bounds: a page whose own header lies about its decompressed size is
decompressed by Arrow as the header says (the footer's sizes above make such a file stand out only
when they lie too).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.errors import ObjectTooLarge, ParquetProblem
from seqexport_dagster.management.verify.bounds import MIB, size_text

#: One row group decompressed, at most: 5,000 rows of the widest dataset are a few MB.
MAX_ROW_GROUP_BYTES: Final = 64 * MIB
#: What one batch of rows holds decompressed, by the footer's count, and at most this many rows.
BATCH_BYTES: Final = 4 * MIB
BATCH_ROWS: Final = 1_000


def parquet_rows(
    ds: Dataset, body: bytes, *, part_limit: int, max_bytes: int, max_row_bytes: int
) -> Iterator[dict[str, Any]]:
    """The part's rows, row group by row group. Raises `ParquetProblem` (``corrupt_parquet``,
    ``schema_mismatch``, ``too_many_lines``) or `ObjectTooLarge` from the footer's checks, made here,
    before any row is read (a refused part costs its footer only); the rows, as they are read, raise
    `ParquetProblem` (``corrupt_parquet``) or `ObjectTooLarge` past the bounds."""
    # Imported here: only Parquet exports need pyarrow, and it costs ~0.2 s to import.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seqexport_dagster.delivery.parquet_writer import arrow_schema

    try:
        handle = pq.ParquetFile(io.BytesIO(body), pre_buffer=False)
        meta = handle.metadata
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    except (pa.ArrowException, OSError) as exc:
        raise ParquetProblem("corrupt_parquet", f"not a valid Parquet file: {_first_line(exc)}") from None
    if meta.num_rows > part_limit:
        raise ParquetProblem(
            "too_many_lines", f"its footer claims {meta.num_rows:,} rows; the limit is {part_limit:,} (not read)"
        )
    claimed = sum(max(g.total_byte_size, 0) for g in groups)
    if claimed > max_bytes:
        raise ObjectTooLarge(
            f"its footer claims {claimed:,} bytes decompressed; the bound is {size_text(max_bytes)} "
            "(--max-decompressed-bytes), not read"
        )
    widest = max((g.total_byte_size for g in groups), default=0)
    if widest > MAX_ROW_GROUP_BYTES:
        raise ObjectTooLarge(
            f"its footer claims a row group of {widest:,} bytes decompressed; verify reads at most "
            f"{size_text(MAX_ROW_GROUP_BYTES)} at once, not read"
        )
    expected = arrow_schema(ds)
    found = handle.schema_arrow
    if found.names != expected.names or [f.type for f in found] != [f.type for f in expected]:
        raise ParquetProblem("schema_mismatch", f"columns {_describe(found)}; expected {_describe(expected)}")
    # Text columns are read as dictionaries where the file has them: one value repeated on every row
    # (a few KB of file) stays one value, and each row's size is known before it is made into text.
    texts = [f.name for f in ds.fields if f.type in ("string", "object")]
    texts += [f"{f.name}.list.element" for f in ds.fields if f.type == "array"]
    try:
        compact = pq.ParquetFile(io.BytesIO(body), pre_buffer=False, read_dictionary=texts)
    except (pa.ArrowException, OSError) as exc:
        raise ParquetProblem("corrupt_parquet", f"not a valid Parquet file: {_first_line(exc)}") from None
    return _rows(ds, compact, groups, max_bytes, max_row_bytes)


def _rows(ds: Dataset, handle: Any, groups: list[Any], max_bytes: int, max_row_bytes: int) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

    timestamps = [i for i, f in enumerate(ds.fields) if f.type == "timestamp"]
    read = 0
    for index, group in enumerate(groups):
        per_row = max(group.total_byte_size, 1) / max(group.num_rows, 1)
        batch_rows = max(1, min(BATCH_ROWS, int(BATCH_BYTES / per_row)))
        try:
            for batch in handle.iter_batches(batch_size=batch_rows, row_groups=[index], use_threads=False):
                sizes = _row_sizes(batch)
                widest = int(sizes.max()) if len(sizes) else 0
                if widest > max_row_bytes:
                    raise ObjectTooLarge(
                        f"has a row of {widest:,} bytes; the bound is {size_text(max_row_bytes)} (--max-line-bytes)"
                    )
                read += int(sizes.sum())
                if read > max_bytes:
                    raise ObjectTooLarge(f"decompresses to more than {size_text(max_bytes)} (--max-decompressed-bytes)")
                for i in timestamps:  # epoch milliseconds, which `iso_ms` renders as the JSONL files do
                    batch = batch.set_column(i, ds.fields[i].name, batch.column(i).cast(pa.int64()))
                for start, stop in _slices(sizes, BATCH_BYTES):  # made into Python objects a slice at a time
                    for row in batch.slice(start, stop - start).to_pylist():
                        yield _json_form(ds, row)
        except (pa.ArrowException, OSError) as exc:
            raise ParquetProblem("corrupt_parquet", f"cannot read its columns: {_first_line(exc)}") from None


def _row_sizes(batch: Any) -> Any:
    """Each row's bytes as text (string and list values by their lengths, other values 8), computed
    on the Arrow columns, dictionaries not expanded: what the row costs once made into Python."""
    import numpy as np
    import pyarrow as pa

    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        if pa.types.is_list(column.type):
            flat = _value_lengths(column.values)
            ends = np.concatenate([[0], np.cumsum(flat)])
            offsets = column.offsets.to_numpy(zero_copy_only=False)
            sizes += ends[offsets[1:]] - ends[offsets[:-1]] + 8
        elif pa.types.is_dictionary(column.type) or pa.types.is_string(column.type):
            sizes += _value_lengths(column)
        else:
            sizes += 8
    return sizes


def _value_lengths(column: Any) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        lengths = pc.take(pc.binary_length(column.dictionary), column.indices)
    else:
        lengths = pc.binary_length(column)
    return np.asarray(pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _slices(sizes: Any, budget: int) -> Iterator[tuple[int, int]]:
    """(start, stop) runs of rows holding about ``budget`` bytes each (at least one row)."""
    start, held = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if held and held + size > budget:
            yield start, i
            start, held = i, 0
        held += size
    if start < len(sizes):
        yield start, len(sizes)


def parquet_row_count(body: bytes) -> int:
    """Rows in a part from its footer alone (``verify``'s summary, the manifest counts)."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(io.BytesIO(body)).metadata.num_rows)


def _json_form(ds: Dataset, row: dict[str, Any]) -> dict[str, Any]:
    """The row as its JSONL line would decode: what `row.row_problem` and the order checks read."""
    for f in ds.fields:
        value = row[f.name]
        if value is None:
            continue
        if f.type == "timestamp":
            row[f.name] = iso_ms(value)
        elif f.type == "object":
            try:
                row[f.name] = msgspec.json.decode(value)
            except msgspec.DecodeError:
                pass  # left as text: the schema check reports "string, not object"
    return row


def _describe(schema: Any) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
