"""Each contract type as a column type of each warehouse, and the paths both formats select: shared by
the JSONL (`warehouse`), the Parquet (`warehouse_parquet`) and the both-formats (`warehouse_both`)
loading statements, so all declare exactly the same columns and read the same days."""

from __future__ import annotations

from typing import Final

from seqexport_dagster.contract.schema import Dataset, Field

#: The Hive partition column every loader derives from ``date=YYYY-MM-DD`` folders.
PARTITION_COLUMN: Final = "date"
REDSHIFT_MAX_VARCHAR: Final = 65_535
#: Room for enum values added in later schema versions (adding a value is allowed, retyping is not).
ENUM_CHARS: Final = 16


def snowflake_type(f: Field) -> str:
    if f.type == "string":
        return f"VARCHAR({f.max_length})" if f.max_length else "VARCHAR"
    return {"timestamp": "TIMESTAMP_TZ(3)", "integer": "NUMBER(38,0)", "object": "VARIANT", "array": "ARRAY"}[f.type]


def bigquery_type(f: Field) -> str:
    return {
        "string": "STRING",
        "timestamp": "TIMESTAMP",
        "integer": "INT64",
        "object": "JSON",
        "array": "ARRAY<STRING>",
    }[f.type]


def redshift_type(f: Field) -> str:
    if f.type == "string":
        chars = f.max_length or (ENUM_CHARS if f.enum else None)
        return f"VARCHAR({min(4 * chars, REDSHIFT_MAX_VARCHAR)})" if chars else f"VARCHAR({REDSHIFT_MAX_VARCHAR})"
    return {"timestamp": "TIMESTAMPTZ", "integer": "INTEGER", "object": "SUPER", "array": "SUPER"}[f.type]


def duckdb_type(f: Field) -> str:
    return {
        "string": "VARCHAR",
        "timestamp": "TIMESTAMPTZ",
        "integer": "BIGINT",
        "object": "JSON",
        "array": "VARCHAR[]",
    }[f.type]


#: The example window of the docs' Redshift statements: the first hour of 2026-09-30 (a manifest's example too).
EXAMPLE_WINDOW: Final = (1_790_726_400_000, 1_790_730_000_000)


def redshift_source(ds: Dataset, *, uri: str, day: str, window: tuple[int, int]) -> str:
    """The key prefix one Redshift ``COPY`` loads: one window of events, one day of the snapshot.

    COPY selects every object under a key prefix and cannot filter by suffix. A day's prefix
    (``email_events-``) would also match the other format's parts on the day of a format change, but a
    window is never split across formats (late parts keep the window's format), so a window's prefix
    matches one format only. A snapshot day is written in one format too."""
    if ds.is_snapshot:
        return f"{uri}/{ds.name}/date={day}/{ds.name}-"
    return f"{uri}/{ds.name}/date={day}/{ds.name}-{window[0]}-{window[1]}-"


def duckdb_latest_complete_day(ds: Dataset, root: str) -> str:
    """The snapshot's latest day whose ``_SUCCESS`` exists, whatever the format of its parts: a snapshot
    is the whole list as of its day, so the views show that day alone (a subscriber deleted upstream
    leaves with the next day), and never a day still being written."""
    return (
        f"{PARTITION_COLUMN} = (SELECT max(CAST(regexp_extract(file, 'date=([0-9-]+)/_SUCCESS$', 1) AS DATE))\n"
        f"        FROM glob('{root}/{ds.name}/*/_SUCCESS'))"
    )


def snowflake_casts(ds: Dataset) -> str:
    """The typed columns of the JSONL raw table's VARIANT: each field cast to its contract type."""
    exprs = [f"raw:{f.name}::{snowflake_type(f)}" for f in ds.fields]
    width = max(len(e) for e in exprs)
    return ",\n".join(f"  {e:<{width}} AS {f.name}" for e, f in zip(exprs, ds.fields, strict=True))


def duckdb_columns(ds: Dataset) -> str:
    """The ``columns`` argument of DuckDB's read_json: the contract's types, not guesses."""
    return "{" + ", ".join(f"'{f.name}': '{duckdb_type(f)}'" for f in ds.fields) + "}"


def duckdb_read_json(ds: Dataset, root: str) -> str:
    """The JSONL parts of every day, typed by the contract, with ``date`` from the folder names."""
    return (
        f"read_json('{root}/{ds.name}/*/*.jsonl.gz',\n"
        f"                        format = 'newline_delimited', hive_partitioning = true,\n"
        f"                        columns = {duckdb_columns(ds)})"
    )
