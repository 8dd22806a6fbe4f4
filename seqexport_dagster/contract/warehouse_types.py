"""Each contract type as a column type of each warehouse: shared by the JSONL (`warehouse`) and the
Parquet (`warehouse_parquet`) loading statements, so both declare exactly the same columns."""

from __future__ import annotations

from typing import Final

from seqexport_dagster.contract.schema import Field

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
