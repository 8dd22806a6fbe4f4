"""Loading statements for exports in the ``parquet`` format, generated from the row contract.

The Parquet files carry their own typed schema (`parquet_writer.arrow_schema`), so each warehouse reads
the columns by name and type instead of parsing text. Free-form objects (``properties``, ``attributes``)
are JSON text in a string column; each statement turns them into the warehouse's JSON type in its view
(``PARSE_JSON``, ``JSON_PARSE``, ``::JSON``). Every view keeps each ``id`` once (late parts and backfills
may deliver an id again, as in the JSONL statements).

After a format change the day of the change can hold both kinds of part, so both formats' statements
must run over the same folders side by side:
- every statement here selects the ``.parquet`` parts of the ``date=`` folders only (never a Delta
  table's checkpoints in ``_delta_log/``: `PARTS_GLOB`; Redshift: one window's key prefix, and a
  window is never split across formats), the JSONL statements of `warehouse` ``*.jsonl.gz`` only;
- the objects they create have names of their own (``<dataset>_parquet_raw``, the view
  ``<dataset>_parquet``, Redshift's ``<dataset>_parquet_staging``), so neither replaces the other's. Only
  Redshift's typed table ``<dataset>`` is shared, on purpose: both formats load into the same columns.
`warehouse_both` then gives the one view over both formats that a customer keeps through a change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from seqexport_dagster.contract.schema import Dataset, Field
from seqexport_dagster.contract.warehouse_stage import snowflake_stage
from seqexport_dagster.contract.warehouse_types import (
    EXAMPLE_WINDOW,
    PARTITION_COLUMN,
    REDSHIFT_MAX_VARCHAR,
    duckdb_latest_complete_day,
    duckdb_type,
    redshift_source,
    redshift_type,
    snowflake_type,
)

#: The Parquet parts of a dataset folder, and nothing else there: a Delta table (``--table delta``)
#: keeps its log in ``<dataset>/_delta_log/``, whose checkpoints are Parquet files too. ``*/*.parquet``
#: would read them as rows (DuckDB: "Hive partition mismatch"; Snowflake's MATCH_BY_COLUMN_NAME: rows
#: of NULLs), so every reader selects the ``date=`` folders. BigQuery's one wildcard also matches
#: slashes; Snowflake's PATTERN is a regular expression over the whole path.
PARTS_GLOB: Final = "date=*/*.parquet"
PARTS_GLOB_ANY_DEPTH: Final = "date=*.parquet"
SNOWFLAKE_PARQUET_PATTERN: Final = ".*date=[^/]*/[^/]*[.]parquet"


def _order(ds: Dataset) -> str:
    return "updated_at" if ds.is_snapshot else "recorded_at"


def _objects(ds: Dataset) -> list[Field]:
    return [f for f in ds.fields if f.type == "object"]


def _aligned(pairs: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in pairs)
    return ",\n".join(f"  {name:<{width}} {kind}".rstrip() for name, kind in pairs)


def snowflake_parquet_type(f: Field) -> str:
    """Objects land as text (the file's string column), parsed in the view."""
    return "VARCHAR" if f.type == "object" else snowflake_type(f)


def snowflake_select(ds: Dataset) -> str:
    """The view's columns over the Parquet raw table: objects parsed, everything else as loaded."""
    return ",\n".join(f"  PARSE_JSON({f.name}) AS {f.name}" if f.type == "object" else f"  {f.name}" for f in ds.fields)


def snowflake(
    ds: Dataset, *, stage: str = "sequenzy_stage", uri: str = "s3://acme-exports/sequenzy", day: str = "2026-09-30"
) -> str:
    """The stage, a typed raw table loaded by column name, and a view that parses objects and keeps each
    id once. A snapshot loads one day (after its ``_SUCCESS``) and its view shows the latest day loaded.

    ``MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE``: the table's unquoted column names are stored in upper
    case and the files' are lower case, so a case-sensitive match finds no column at all (every value
    NULL, and the NOT NULL columns refuse the load)."""
    columns = [(f.name, snowflake_parquet_type(f) + ("" if f.nullable else " NOT NULL")) for f in ds.fields]
    source = f"@{stage}/{ds.name}/" + (f"date={day}/" if ds.is_snapshot else "")
    raw = f"{ds.name}_parquet_raw"
    loaded_day = "REGEXP_SUBSTR(file, 'date=([0-9-]+)', 1, 1, 'e')"
    latest = f"WHERE {loaded_day} = (SELECT MAX({loaded_day}) FROM {raw})\n" if ds.is_snapshot else ""
    return (
        snowflake_stage(stage=stage, uri=uri)
        + "\n\n"
        + "CREATE FILE FORMAT IF NOT EXISTS sequenzy_parquet TYPE = PARQUET USE_LOGICAL_TYPE = TRUE;\n\n"
        + f"CREATE TABLE IF NOT EXISTS {raw} (\n{_aligned([*columns, ('file', 'STRING')])}\n);\n\n"
        + "-- Only Parquet parts: never _SUCCESS, the JSONL parts of days before a format change, nor a\n"
        + "-- Delta table's checkpoints (_delta_log/*.checkpoint.parquet, with --table delta).\n"
        + f"COPY INTO {raw}\n"
        f"FROM {source}\n"
        f"FILE_FORMAT = (FORMAT_NAME = 'sequenzy_parquet')\n"
        f"MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE\n"
        f"INCLUDE_METADATA = (file = METADATA$FILENAME)\n"
        f"PATTERN = '{SNOWFLAKE_PARQUET_PATTERN}';\n\n"
        f"CREATE OR REPLACE VIEW {ds.name}_parquet AS\n"
        f"SELECT\n{snowflake_select(ds)}\n"
        f"FROM {raw}\n" + latest + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) = 1;"
    )


def bigquery_select(ds: Dataset) -> str:
    """The view's columns over the Parquet external table: objects parsed from their JSON text."""
    return ",\n".join(
        f"  SAFE.PARSE_JSON({f.name}) AS {f.name}" if f.type == "object" else f"  {f.name}" for f in ds.fields
    )


def bigquery(ds: Dataset, *, dataset: str = "sequenzy", uri: str = "gs://acme-exports/sequenzy") -> str:
    """An external table over the Parquet parts (schema from the files, ``date`` from the folders)."""
    return (
        f"CREATE OR REPLACE EXTERNAL TABLE {dataset}.{ds.name}_parquet_raw\n"
        f"WITH PARTITION COLUMNS ({PARTITION_COLUMN} DATE)\n"
        f"OPTIONS (\n"
        f"  format = 'PARQUET',\n"
        f"  enable_list_inference = TRUE,\n"
        f"  uris = ['{uri}/{ds.name}/{PARTS_GLOB_ANY_DEPTH}'],\n"
        f"  hive_partition_uri_prefix = '{uri}/{ds.name}'\n"
        f");\n\n"
        f"CREATE OR REPLACE VIEW {dataset}.{ds.name}_parquet AS\n"
        f"SELECT\n{bigquery_select(ds)},\n  {PARTITION_COLUMN}\n"
        f"FROM {dataset}.{ds.name}_parquet_raw\n"
        f"WHERE TRUE  -- BigQuery accepts QUALIFY only beside a WHERE, GROUP BY or HAVING\n"
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) = 1;"
    )


def redshift_staging_type(f: Field) -> str:
    """COPY's Parquet columns: objects are text until JSON_PARSE, lists arrive as SUPER."""
    if f.type == "object":
        return f"VARCHAR({REDSHIFT_MAX_VARCHAR})"
    return redshift_type(f)


def redshift(
    ds: Dataset,
    *,
    uri: str = "s3://acme-exports/sequenzy",
    iam_role: str = "arn:aws:iam::123456789012:role/redshift-s3-read",
    day: str = "2026-09-30",
    window: tuple[int, int] = EXAMPLE_WINDOW,
) -> str:
    """A staging table in the files' column order, COPY of one window (of the snapshot: one day), then an
    insert keeping each id once, into the same typed table as the JSONL statement's."""
    staging = _aligned([(f.name, redshift_staging_type(f)) for f in ds.fields])
    final = _aligned([(f.name, redshift_type(f) + ("" if f.nullable else " NOT NULL")) for f in ds.fields])
    names = ",\n  ".join(ds.field_names)
    values = ",\n  ".join(f"JSON_PARSE({f.name})" if f.type == "object" else f.name for f in ds.fields)
    replace_all = ds.is_snapshot
    return (
        f"CREATE TABLE IF NOT EXISTS {ds.name} (\n{final}\n);\n"
        f"CREATE TEMP TABLE {ds.name}_parquet_staging (\n{staging}\n);\n\n"
        f"COPY {ds.name}_parquet_staging\n"
        f"FROM '{redshift_source(ds, uri=uri, day=day, window=window)}'\n"
        f"IAM_ROLE '{iam_role}'\n"
        f"FORMAT AS PARQUET SERIALIZETOJSON;\n\n"
        + (
            f"BEGIN;\nDELETE FROM {ds.name};\n"
            if replace_all
            else f"DELETE FROM {ds.name} USING {ds.name}_parquet_staging s WHERE {ds.name}.id = s.id;\n"
        )
        + f"INSERT INTO {ds.name} (\n  {names}\n)\n"
        f"SELECT\n  {values}\nFROM (\n"
        f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) AS rn\n"
        f"  FROM {ds.name}_parquet_staging\n"
        f") AS ranked\nWHERE rn = 1;" + ("\nCOMMIT;" if replace_all else "")
    )


def duckdb_select(ds: Dataset, root: str) -> str:
    """The Parquet parts of every day, objects as JSON, ``date`` from the folder names."""
    select = ",\n".join(
        f"  {f.name}::{duckdb_type(f)} AS {f.name}" if f.type == "object" else f"  {f.name}" for f in ds.fields
    )
    return (
        f"SELECT\n{select},\n  {PARTITION_COLUMN}\n"
        f"FROM read_parquet('{root}/{ds.name}/{PARTS_GLOB}', hive_partitioning = true)"
    )


def duckdb(ds: Dataset, *, root: str = "s3://acme-exports/sequenzy") -> str:
    """Events: every day, each id once. The snapshot: its latest complete day only."""
    latest = f"WHERE {duckdb_latest_complete_day(ds, root)}\n" if ds.is_snapshot else ""
    return (
        f"CREATE OR REPLACE VIEW {ds.name}_parquet AS\n"
        f"{duckdb_select(ds, root)}\n"
        + latest
        + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {_order(ds)} DESC) = 1;"
    )


GENERATORS: Final[dict[str, Callable[[Dataset], str]]] = {
    "snowflake": snowflake,
    "bigquery": bigquery,
    "redshift": redshift,
    "duckdb": duckdb,
}
