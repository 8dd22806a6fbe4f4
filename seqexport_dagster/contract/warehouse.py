"""Warehouse DDL generated from the row contract, so the published statements match the schemas exactly.

``python -m seqexport_dagster.contract.warehouse WAREHOUSE DATASET`` prints the statements for any dataset;
``docs/customers.md`` shows them for ``email_events`` and a test keeps both in step with `schema.DATASETS`.

Type choices, and why:
- timestamps are ``YYYY-MM-DDTHH:MM:SS.mmmZ``: Snowflake's TIMESTAMP_TZ, BigQuery's TIMESTAMP,
  DuckDB's TIMESTAMPTZ and Redshift's ``TIMEFORMAT 'auto'`` (its documented ISO 8601 example is
  ``2019-02-11T05:09:12.195Z``) all parse them as they are;
- Redshift's VARCHAR(n) counts bytes, our ``max_length`` counts characters: we allow 4 bytes per
  character (UTF-8's maximum) so a name like "Zoë Núñez" never truncates a load;
- objects and arrays stay semi-structured (VARIANT/ARRAY, JSON/ARRAY<STRING>, SUPER, JSON/VARCHAR[]).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from seqexport_dagster.contract.schema import DATASETS, Dataset, Field
from seqexport_dagster.contract.warehouse_stage import snowflake_stage
from seqexport_dagster.contract.warehouse_types import (
    EXAMPLE_WINDOW,
    PARTITION_COLUMN,
    bigquery_type,
    duckdb_latest_complete_day,
    duckdb_read_json,
    duckdb_type,
    redshift_source,
    redshift_type,
    snowflake_casts,
    snowflake_type,
)

WAREHOUSES: Final = ("snowflake", "bigquery", "redshift", "duckdb")


def _not_null(f: Field) -> str:
    return "" if f.nullable else " NOT NULL"


def _columns(ds: Dataset, typer: Callable[[Field], str], *, not_null: bool = True) -> str:
    width = max(len(f.name) for f in ds.fields)
    return ",\n".join(f"  {f.name:<{width}} {typer(f)}{_not_null(f) if not_null else ''}".rstrip() for f in ds.fields)


def snowflake(ds: Dataset, *, stage: str = "sequenzy_stage", uri: str = "s3://acme-exports/sequenzy",
              day: str = "2026-09-30") -> str:  # fmt: skip
    """The stage, the docs' raw table (VARIANT + file name), and a typed, deduplicated view over it.

    Events load every new part of the dataset. The snapshot loads one day, after its ``_SUCCESS``,
    and its view shows the latest day loaded only: a snapshot is the whole list as of its day, so the
    previous day's rows are replaced, never merged with it."""
    casts = snowflake_casts(ds)
    order = "recorded_at" if not ds.is_snapshot else "updated_at"
    source = f"@{stage}/{ds.name}/" + (f"date={day}/" if ds.is_snapshot else "")
    loaded_day = "REGEXP_SUBSTR(file, 'date=([0-9-]+)', 1, 1, 'e')"
    latest = f"WHERE {loaded_day} = (SELECT MAX({loaded_day}) FROM {ds.name}_raw)\n" if ds.is_snapshot else ""
    return (
        snowflake_stage(stage=stage, uri=uri)
        + "\n\n"
        + f"CREATE TABLE IF NOT EXISTS {ds.name}_raw (raw VARIANT, file STRING);\n\n"
        + (
            "-- One day's snapshot, once its _SUCCESS exists; only part files, never _SUCCESS itself.\n"
            if ds.is_snapshot
            else "-- Only part files: never _SUCCESS or anything else in the folder.\n"
        )
        + f"COPY INTO {ds.name}_raw (raw, file)\n"
        f"FROM (SELECT $1, METADATA$FILENAME FROM {source})\n"
        f"PATTERN = '.*[.]jsonl[.]gz';\n\n"
        f"CREATE OR REPLACE VIEW {ds.name} AS\n"
        f"SELECT\n{casts}\n"
        f"FROM {ds.name}_raw\n"
        + latest
        + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY raw:id::VARCHAR ORDER BY raw:{order}::TIMESTAMP_TZ DESC) = 1;"
    )


def bigquery(ds: Dataset, *, dataset: str = "sequenzy", uri: str = "gs://acme-exports/sequenzy") -> str:
    """An external table with the contract's columns; ``date`` comes from the folder names."""
    order = "recorded_at" if not ds.is_snapshot else "updated_at"
    return (
        f"CREATE OR REPLACE EXTERNAL TABLE {dataset}.{ds.name}_raw (\n{_columns(ds, bigquery_type, not_null=False)}\n)\n"
        f"WITH PARTITION COLUMNS ({PARTITION_COLUMN} DATE)\n"
        f"OPTIONS (\n"
        f"  format = 'NEWLINE_DELIMITED_JSON',\n"
        f"  compression = 'GZIP',\n"
        f"  uris = ['{uri}/{ds.name}/*.jsonl.gz'],\n"
        f"  hive_partition_uri_prefix = '{uri}/{ds.name}'\n"
        f");\n\n"
        f"CREATE OR REPLACE VIEW {dataset}.{ds.name} AS\n"
        f"SELECT * EXCEPT (rn) FROM (\n"
        f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {order} DESC) AS rn\n"
        f"  FROM {dataset}.{ds.name}_raw\n"
        f")\n"
        f"WHERE rn = 1;"
    )


def redshift(
    ds: Dataset,
    *,
    uri: str = "s3://acme-exports/sequenzy",
    iam_role: str = "arn:aws:iam::123456789012:role/redshift-s3-read",
    day: str = "2026-09-30",
    window: tuple[int, int] = EXAMPLE_WINDOW,
) -> str:
    """Staging table, COPY of one window (of the snapshot: one day), then an insert that keeps each id once.

    The typed table is the one the Parquet statements load too (`warehouse_parquet.redshift`)."""
    order = "recorded_at" if not ds.is_snapshot else "updated_at"
    names = ",\n  ".join(ds.field_names)
    return (
        f"CREATE TABLE IF NOT EXISTS {ds.name} (\n{_columns(ds, redshift_type)}\n);\n"
        f"CREATE TEMP TABLE {ds.name}_staging (LIKE {ds.name});\n\n"
        f"COPY {ds.name}_staging\n"
        f"FROM '{redshift_source(ds, uri=uri, day=day, window=window)}'\n"
        f"IAM_ROLE '{iam_role}'\n"
        f"FORMAT AS JSON 'auto ignorecase'\n"
        f"GZIP TIMEFORMAT 'auto';\n\n"
        + (
            # A snapshot is the whole state: replace the table (DELETE, not TRUNCATE, which commits).
            f"BEGIN;\nDELETE FROM {ds.name};\n"
            if ds.is_snapshot
            else f"DELETE FROM {ds.name} USING {ds.name}_staging s WHERE {ds.name}.id = s.id;\n"
        )
        + f"INSERT INTO {ds.name} (\n  {names}\n)\n"
        f"SELECT\n  {names}\nFROM (\n"
        f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {order} DESC) AS rn FROM {ds.name}_staging\n"
        # Redshift requires an alias on a subquery in FROM.
        f") AS latest WHERE rn = 1;" + ("\nCOMMIT;" if ds.is_snapshot else "")
    )


def duckdb(ds: Dataset, *, root: str = "s3://acme-exports/sequenzy") -> str:
    """Events: every day, each id once. The snapshot: its latest complete day only."""
    order = "recorded_at" if not ds.is_snapshot else "updated_at"
    latest = f"WHERE {duckdb_latest_complete_day(ds, root)}\n" if ds.is_snapshot else ""
    return (
        f"CREATE OR REPLACE VIEW {ds.name} AS\n"
        f"SELECT * FROM {duckdb_read_json(ds, root)}\n"
        + latest
        + f"QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY {order} DESC) = 1;"
    )


GENERATORS: Final[dict[str, Callable[[Dataset], str]]] = {
    "snowflake": snowflake,
    "bigquery": bigquery,
    "redshift": redshift,
    "duckdb": duckdb,
}


def type_table() -> str:
    """Markdown: each contract type and its column type per warehouse."""
    samples = {
        "string (max n characters)": Field("x", "string", "", max_length=255),
        "string (no limit)": Field("x", "string", ""),
        "timestamp": Field("x", "timestamp", ""),
        "integer": Field("x", "integer", ""),
        "object": Field("x", "object", ""),
        "array of strings": Field("x", "array", ""),
    }
    lines = ["| contract type | Snowflake | BigQuery | Redshift | DuckDB |", "|---|---|---|---|---|"]
    for label, f in samples.items():
        sf, rs = snowflake_type(f), redshift_type(f)
        if f.max_length:
            sf, rs = "VARCHAR(n)", "VARCHAR(4n), at most 65535"
        lines.append(f"| {label} | `{sf}` | `{bigquery_type(f)}` | `{rs}` | `{duckdb_type(f)}` |")
    return "\n".join(lines)


def _fail(message: str) -> int:
    sys.stderr.write(f"error: {message} (see `python -m seqexport_dagster.contract.warehouse --help`)\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    """``WAREHOUSE DATASET [--bucket B] [--prefix P] [--stage S]``: one clear error per mistake, exit 2."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m seqexport_dagster.contract.warehouse",
        description="Print the DDL that loads one dataset of an export into a warehouse.",
        allow_abbrev=False,
    )
    parser.add_argument("warehouse", help=", ".join(WAREHOUSES))
    parser.add_argument("dataset", help=", ".join(DATASETS))
    parser.add_argument("--bucket", help="the export's bucket; default acme-exports")
    parser.add_argument("--prefix", help="the export's prefix inside the bucket; default sequenzy")
    parser.add_argument("--stage", help="snowflake: the stage created over <bucket>/<prefix>; default sequenzy_stage")
    parser.add_argument(
        "--format",
        default="jsonl.gz",
        help="the export's file format: jsonl.gz (default) or parquet; both: the one view over both formats",
    )
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        parser.print_help()
        return 0
    known, rest = parser.parse_known_args(args) if len(args) >= 2 else (None, args)
    if known is None:
        return _fail(f"give a warehouse ({', '.join(WAREHOUSES)}) and a dataset ({', '.join(DATASETS)})")
    if rest:
        return _fail(f"unrecognized arguments: {' '.join(rest)}; accepted options are --bucket, --prefix, --stage")
    if known.warehouse not in GENERATORS:
        return _fail(f"warehouse {known.warehouse!r} is not one of {', '.join(WAREHOUSES)}")
    if known.dataset not in DATASETS:
        return _fail(f"dataset {known.dataset!r} is not one of {', '.join(DATASETS)}")
    ds = DATASETS[known.dataset]
    if known.format not in ("jsonl.gz", "parquet", "both"):
        return _fail(f"--format {known.format!r} is not one of jsonl.gz, parquet, both")
    generators = GENERATORS
    if known.format == "parquet":
        from seqexport_dagster.contract import warehouse_parquet

        generators = warehouse_parquet.GENERATORS
    if known.format == "both":
        from seqexport_dagster.contract import warehouse_both

        generators = warehouse_both.GENERATORS
        if known.warehouse == "redshift":
            return _fail("--format both: Redshift needs no view, both formats' COPY load the same table")
    if known.stage is not None and known.warehouse != "snowflake":
        return _fail(f"--stage applies to snowflake only; {known.warehouse} takes --bucket and --prefix")
    bucket = known.bucket if known.bucket is not None else "acme-exports"
    prefix = (known.prefix if known.prefix is not None else "sequenzy").strip("/")
    if not bucket or "/" in bucket:
        return _fail(f"--bucket {bucket!r} is not a bucket name (no slashes, not empty)")
    scheme = "gs" if known.warehouse == "bigquery" else "s3"
    uri = f"{scheme}://{bucket}/{prefix}".rstrip("/")
    make = generators[known.warehouse]
    if known.format == "both":
        text = make(ds, root=uri) if known.warehouse == "duckdb" else make(ds)  # type: ignore[call-arg]
    elif known.warehouse == "snowflake":
        text = make(ds, stage=known.stage or "sequenzy_stage", uri=uri)  # type: ignore[call-arg]
    else:
        text = make(ds, root=uri) if known.warehouse == "duckdb" else make(ds, uri=uri)  # type: ignore[call-arg]
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
