"""Parquet parts read back as the rows of the published contract, for the same checks as JSONL.

A part must carry exactly the Arrow schema generated from `schema.py` (names, order, types); its rows
are then given in the JSON form the row checks know (timestamps as ``…Z`` text, objects decoded), so
order, window bounds, duplicates and the schema's enums are checked once for both formats.

Bounded like the JSONL path: the footer's row count and uncompressed size are read before any column
is, and a part that claims more than ``max_bytes`` decompressed is refused unread.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.contract.window import iso_ms

#: What one part may hold decompressed: 50,000 rows of the widest dataset stay far below it.
MAX_DECOMPRESSED_BYTES: Final = 512 * 1024 * 1024


@dataclass(slots=True)
class ParquetPart:
    """The rows of one part, or the one problem that kept them from being read (``kind``, ``detail``)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    problem: tuple[str, str] | None = None


def read_parquet_part(ds: Dataset, body: bytes, *, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> ParquetPart:
    # Imported here: only Parquet exports need pyarrow, and it costs ~0.2 s to import.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seqexport_dagster.delivery.parquet_writer import arrow_schema

    try:
        handle = pq.ParquetFile(io.BytesIO(body))
    except (pa.ArrowException, OSError) as exc:
        return ParquetPart(problem=("corrupt_parquet", f"not a valid Parquet file: {_first_line(exc)}"))
    meta = handle.metadata
    claimed = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if claimed > max_bytes:
        return ParquetPart(
            problem=("too_large", f"claims {claimed:,} bytes decompressed; the limit is {max_bytes:,} (--max-bytes)")
        )
    expected = arrow_schema(ds)
    found = handle.schema_arrow
    if found.names != expected.names or [f.type for f in found] != [f.type for f in expected]:
        return ParquetPart(problem=("schema_mismatch", f"columns {_describe(found)}; expected {_describe(expected)}"))
    try:
        table = handle.read()
    except (pa.ArrowException, OSError) as exc:
        return ParquetPart(problem=("corrupt_parquet", f"cannot read its columns: {_first_line(exc)}"))
    for i, f in enumerate(ds.fields):
        if f.type == "timestamp":  # epoch milliseconds, which `iso_ms` renders as the JSONL files do
            table = table.set_column(i, f.name, table.column(i).cast(pa.int64()))
    return ParquetPart(rows=[_json_form(ds, row) for row in table.to_pylist()])


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
