"""One view over both formats, for the day of a format change and every day after it.

Each format's statements (`warehouse` for JSONL, `warehouse_parquet` for Parquet) create objects of their
own and select only their own parts, so both run over the same folders. This view unions the two typed
sources under the dataset's own name, the name the JSONL statements gave their view: a customer's queries
keep working through the change, and stay right afterwards because the JSONL days stay where they are.
It keeps each ``id`` once across both formats (a window is never split across formats, but a backfill in
the new format may deliver ids again), and for the snapshot the latest day only, whichever format that
day was written in.

Redshift needs no view: both formats' COPY statements load the same typed table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Final

from seqexport_dagster.contract import warehouse_parquet
from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.contract.warehouse_types import (
    PARTITION_COLUMN,
    duckdb_latest_complete_day,
    duckdb_read_json,
    snowflake_casts,
)


def _order(ds: Dataset) -> str:
    return "updated_at" if ds.is_snapshot else "recorded_at"


def _indent(text: str) -> str:
    return textwrap.indent(text, "  ")


def snowflake(ds: Dataset) -> str:
    """Run after the Parquet statements (they create ``<dataset>_parquet_raw``); the JSONL raw table is
    created here if the export was Parquet from its start."""
    names = ",\n".join(f"  {n}" for n in ds.field_names)
    loaded_day = "REGEXP_SUBSTR(file, 'date=([0-9-]+)', 1, 1, 'e')"
    files = f"SELECT file FROM {ds.name}_raw UNION ALL SELECT file FROM {ds.name}_parquet_raw"
    latest = f"WHERE {loaded_day} = (SELECT MAX({loaded_day}) FROM ({files}))\n" if ds.is_snapshot else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {ds.name}_raw (raw VARIANT, file STRING);\n\n"
        f"CREATE OR REPLACE VIEW {ds.name} AS\n"
        f"SELECT\n{names}\n"
        f"FROM (\n"
        f"  SELECT\n{_indent(snowflake_casts(ds))},\n    file\n"
        f"  FROM {ds.name}_raw\n"
        f"  UNION ALL\n"
        f"  SELECT\n{_indent(warehouse_parquet.snowflake_select(ds))},\n    file\n"
        f"  FROM {ds.name}_parquet_raw\n"
        f") AS both_formats\n" + latest + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) = 1;"
    )


def bigquery(ds: Dataset, *, dataset: str = "sequenzy") -> str:
    """Over both external tables (``<dataset>_raw``, ``<dataset>_parquet_raw``); ``date`` from the folders."""
    names = ",\n".join(f"  {n}" for n in (*ds.field_names, PARTITION_COLUMN))
    return (
        f"CREATE OR REPLACE VIEW {dataset}.{ds.name} AS\n"
        f"SELECT * EXCEPT (rn) FROM (\n"
        f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) AS rn\n"
        f"  FROM (\n"
        f"    SELECT\n{textwrap.indent(names, '    ')}\n"
        f"    FROM {dataset}.{ds.name}_raw\n"
        f"    UNION ALL\n"
        f"    SELECT\n{textwrap.indent(warehouse_parquet.bigquery_select(ds), '    ')},\n      {PARTITION_COLUMN}\n"
        f"    FROM {dataset}.{ds.name}_parquet_raw\n"
        f"  )\n"
        f")\n"
        f"WHERE rn = 1;"
    )


def duckdb(ds: Dataset, *, root: str = "s3://acme-exports/sequenzy") -> str:
    """Both kinds of part of every day; create it once both exist (from the day of the change): DuckDB
    refuses a glob that matches no file."""
    latest = f"WHERE {duckdb_latest_complete_day(ds, root)}\n" if ds.is_snapshot else ""
    return (
        f"CREATE OR REPLACE VIEW {ds.name} AS\n"
        f"SELECT * FROM (\n"
        f"  SELECT * FROM {duckdb_read_json(ds, root)}\n"
        f"  UNION ALL\n"
        f"{_indent(warehouse_parquet.duckdb_select(ds, root))}\n"
        f") AS both_formats\n" + latest + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) = 1;"
    )


GENERATORS: Final[dict[str, Callable[[Dataset], str]]] = {
    "snowflake": snowflake,
    "bigquery": bigquery,
    "duckdb": duckdb,
}
