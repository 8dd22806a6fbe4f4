"""One part's rows, whatever its format: gzip JSON Lines or Parquet (as a customer's loader reads them)."""

from __future__ import annotations

import gzip
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from seqexport_dagster.contract.window import iso_ms


def part_rows(key: str, body: bytes) -> list[dict[str, Any]]:
    """The rows of the part stored under ``key`` (relative or full); Parquet timestamps come back in the
    contract's text form, so rows of both formats compare equal to the same source row."""
    if key.endswith(".parquet"):
        return parquet_rows(body)
    if not body:
        return []
    return [json.loads(line) for line in gzip.decompress(body).splitlines() if line]


def parquet_rows(body: bytes) -> list[dict[str, Any]]:
    table = pq.read_table(io.BytesIO(body))
    stamps = [i for i, f in enumerate(table.schema) if pa.types.is_timestamp(f.type)]
    for i in stamps:
        table = table.set_column(i, table.schema.field(i).name, table.column(i).cast(pa.int64()))
    rows = table.to_pylist()
    names = [table.schema.field(i).name for i in stamps]
    for row in rows:
        for name in names:
            if row[name] is not None:
                row[name] = iso_ms(row[name])
    return rows
