"""Hostile Parquet parts and manifests for `verify` (issue 41), planted in a local folder.

Each is small on disk and costly to read naively:

``rows``      a 20-odd KB ``email_events`` part whose footer claims (and whose pages hold) 1,000,000 rows
``claimed``   a zstd part of 900 rows whose ``subject`` is 1 MiB each, plain-encoded: about 30 KB of
              file whose footer claims 944 MB decompressed
``dictionary`` the same 900 rows dictionary-encoded: a few KB whose footer claims 1 MB, 944 MB once
              the dictionary is expanded

Built with pyarrow from the published Arrow schema (`parquet_writer.arrow_schema`), so every one
passes the schema check and is refused (or read) for its size alone.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window
from seqexport_dagster.delivery.parquet_writer import arrow_schema
from seqexport_dagster_tests.support.world import DAY0

WINDOW: Final = Window(DAY0, DAY0 + HOUR_MS)
KEY: Final = part_key("", "email_events", WINDOW, 0, "parquet")
MIB: Final = 1024 * 1024


def email_table(rows: int, subject: str = "s") -> pa.Table:
    """``rows`` rows of one repeated value per column (in the window, every field valid)."""
    schema = arrow_schema(DATASETS["email_events"])
    at = pa.array([DAY0 + 1000], type=pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    same = np.zeros(rows, dtype=np.int64)
    values = {
        "id": pa.array(["eev_same"]),
        "event_type": pa.array(["delivered"]),
        "occurred_at": at,
        "recorded_at": at,
        "subject": pa.array([subject]),
    }
    columns = []
    for f in schema:
        one = values.get(f.name)
        columns.append(pa.nulls(rows, f.type) if one is None else one.take(same))
    return pa.Table.from_arrays(columns, schema=schema)


def parquet_bytes(table: pa.Table, *, dictionary: bool = True, row_group: int | None = None) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", use_dictionary=dictionary, row_group_size=row_group)
    return out.getvalue()


def plant(root: Path, body: bytes) -> Path:
    path = root / KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def million_rows(root: Path, rows: int = 1_000_000) -> Path:
    return plant(root, parquet_bytes(email_table(rows), row_group=rows))


def claimed_bomb(root: Path) -> Path:
    return plant(root, parquet_bytes(email_table(900, "a" * MIB), dictionary=False))


def dictionary_bomb(root: Path) -> Path:
    return plant(root, parquet_bytes(email_table(900, "a" * MIB)))
