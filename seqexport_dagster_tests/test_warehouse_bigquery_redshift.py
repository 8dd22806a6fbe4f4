"""The BigQuery and Redshift statements of docs/customers.md: no engine of either runs here, so sqlglot
parses each in its dialect, and the names and the paths they select are checked against a real export
with a format change (`support.format_change`): the keys each would load, on the day of the change."""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterator

import pytest
import sqlglot
from sqlglot import exp

from seqexport_dagster.contract import warehouse, warehouse_both, warehouse_parquet
from seqexport_dagster.contract.keys import parse_key
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.delivery.parquet_writer import arrow_schema
from seqexport_dagster_tests.support.format_change import DAY2, ChangeExport, write_change_export
from seqexport_dagster_tests.support.snowflake_emulator import statements
from seqexport_dagster_tests.support.world import World, sqlite_world

#: BigQuery's documented options of CREATE EXTERNAL TABLE that the statements use.
BIGQUERY_OPTIONS = {"format", "compression", "uris", "hive_partition_uri_prefix", "enable_list_inference"}
#: Redshift: the only COPY parameters allowed with a columnar format ("COPY from columnar data formats").
REDSHIFT_COLUMNAR_PARAMETERS = {"ACCEPTINVCHARS", "FILLRECORD", "FROM", "IAM_ROLE", "CREDENTIALS", "STATUPDATE",
                                "MANIFEST", "EXPLICIT_IDS", "FORMAT"}  # fmt: skip


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, ChangeExport]]:
    with sqlite_world(tmp_path_factory.mktemp("change")) as world:
        yield world, write_change_export(world)


def _parse(text: str, dialect: str) -> list[exp.Expr]:
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its Command fallback is asserted on, not logged
    return [sqlglot.parse_one(s, read=dialect) for s in statements(text)]


def _keys(export: ChangeExport, dataset: str) -> list[str]:
    return sorted(p.relative_to(export.root).as_posix() for p in (export.root / dataset).rglob("*") if p.is_file())


def _external_table(statement: str) -> tuple[str, str, dict[str, str]]:
    """BigQuery's CREATE EXTERNAL TABLE, which sqlglot leaves as a Command: its name, column list and
    options, each then checked on its own."""
    m = re.fullmatch(
        r"CREATE OR REPLACE EXTERNAL TABLE (\w+\.\w+)(?: \((.*?)\n\))?\n"
        r"WITH PARTITION COLUMNS \(date DATE\)\nOPTIONS \((.*)\n\)",
        statement,
        re.S,
    )
    assert m, statement
    options = dict(re.findall(r"^  (\w+) = (.*?),?$", m[3], re.M))
    return m[1], m[2] or "", options


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_bigquery_statements_parse_and_each_format_has_its_own_names(dataset: str) -> None:
    """The old Parquet statement replaced the JSONL external table and view (the same names)."""
    ds = DATASETS[dataset]
    created: dict[str, set[str]] = {}
    for label, text in (("jsonl", warehouse.bigquery(ds)), ("parquet", warehouse_parquet.bigquery(ds))):
        table, view = statements(text)
        name, columns, options = _external_table(table)
        assert set(options) <= BIGQUERY_OPTIONS, options
        if columns:  # the JSONL table declares the contract's columns: valid BigQuery column definitions
            parsed = sqlglot.parse_one(f"CREATE TABLE t ({columns})", read="bigquery")
            assert [c.name for c in parsed.find_all(exp.ColumnDef)] == list(ds.field_names)
        tree = sqlglot.parse_one(view, read="bigquery")
        assert isinstance(tree, exp.Create) and tree.kind == "VIEW"
        created[label] = {name, tree.this.sql(dialect="bigquery")}
    assert created["jsonl"] == {f"sequenzy.{dataset}_raw", f"sequenzy.{dataset}"}
    assert created["parquet"] == {f"sequenzy.{dataset}_parquet_raw", f"sequenzy.{dataset}_parquet"}
    (both,) = _parse(warehouse_both.bigquery(ds), "bigquery")
    assert isinstance(both, exp.Create) and both.this.sql(dialect="bigquery") == f"sequenzy.{dataset}"
    assert {t.sql(dialect="bigquery") for t in both.expression.find_all(exp.Table)} == {
        f"sequenzy.{dataset}_raw",
        f"sequenzy.{dataset}_parquet_raw",
    }


@pytest.mark.parametrize("dataset", list(EVENT_DATASETS))
def test_bigquery_uris_select_one_format_on_the_day_of_a_change(
    change: tuple[World, ChangeExport], dataset: str
) -> None:
    _, export = change
    ds = DATASETS[dataset]
    keys = _keys(export, dataset)
    for text, suffix in ((warehouse.bigquery(ds), ".jsonl.gz"), (warehouse_parquet.bigquery(ds), ".parquet")):
        _, _, options = _external_table(statements(text)[0])
        (uri,) = re.findall(r"\['gs://acme-exports/sequenzy/(.*)'\]", options["uris"])
        # BigQuery's one wildcard matches any characters, slashes included: fnmatch's `*` does too.
        selected = [k for k in keys if fnmatch.fnmatchcase(k, uri)]
        assert selected == [k for k in keys if k.endswith(suffix)]
        assert any(f"date={DAY2}" in k for k in selected)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_redshift_statements_parse(dataset: str) -> None:
    ds = DATASETS[dataset]
    for text in (warehouse.redshift(ds), warehouse_parquet.redshift(ds)):
        trees = _parse(text, "redshift")
        assert not [t for t in trees if isinstance(t, exp.Command)]
        (copy,) = [t for t in trees if isinstance(t, exp.Copy)]
        assert copy.this.name.endswith("_staging")
    jsonl, parquet = warehouse.redshift(ds), warehouse_parquet.redshift(ds)
    # One typed table for both formats: the same DDL, so either CREATE TABLE IF NOT EXISTS may come first.
    assert statements(jsonl)[0] == statements(parquet)[0]
    # Staging tables of their own: both COPY statements can run in one session.
    assert f"CREATE TEMP TABLE {dataset}_staging " in jsonl and f"CREATE TEMP TABLE {dataset}_parquet_staging (" in parquet
    # COPY from Parquet fills the staging table by position: its columns are the file's, in order.
    staging = re.findall(r"^  (\w+) +\S", statements(parquet)[1], re.M)
    assert staging == arrow_schema(ds).names
    copy = next(s for s in statements(parquet) if s.startswith("COPY"))
    words = set(re.findall(r"^([A-Z_]+)", copy, re.M)) - {"COPY"}
    assert words <= REDSHIFT_COLUMNAR_PARAMETERS and "REGION" not in copy


@pytest.mark.parametrize("dataset", list(EVENT_DATASETS))
def test_redshift_copy_prefix_loads_one_format_on_the_day_of_a_change(
    change: tuple[World, ChangeExport], dataset: str
) -> None:
    """A key prefix selects every object under it: the old day prefix ``.../date=D/<dataset>-`` also
    loaded that day's .parquet parts into the JSON COPY. A window's prefix loads exactly that window's
    parts, all of one format (a window is never split across formats)."""
    _, export = change
    ds = DATASETS[dataset]
    keys = _keys(export, dataset)
    windows = {(k, parsed) for k in keys if (parsed := parse_key(k)) is not None and parsed.window is not None}
    assert {parsed.format for _, parsed in windows if parsed.window.day == DAY2} == {"jsonl.gz", "parquet"}
    for key, parsed in windows:
        window = (parsed.window.from_ms, parsed.window.to_ms)
        make = warehouse.redshift if parsed.format == "jsonl.gz" else warehouse_parquet.redshift
        text = make(ds, uri="s3://acme-exports/sequenzy", day=str(parsed.window.day), window=window)
        (prefix,) = re.findall(r"^FROM 's3://acme-exports/sequenzy/([^']*)'$", text, re.M)
        loaded = [k for k in keys if k.startswith(prefix)]
        assert key in loaded
        assert all(parse_key(k).format == parsed.format for k in loaded), (prefix, loaded)  # type: ignore[union-attr]
    # The docs' statement is one window's, too.
    assert "FROM 's3://acme-exports/sequenzy/email_events/date=2026-09-30/email_events-1790726400000-1790730000000-'" in (
        warehouse.redshift(DATASETS["email_events"])
    )


@pytest.mark.parametrize("dataset", list(EVENT_DATASETS))
def test_the_docs_redshift_jsonl_copy_never_selects_a_parquet_part(
    change: tuple[World, ChangeExport], dataset: str
) -> None:
    """The docs' JSONL statement as printed for the day of the change (``day=``): whatever it selects
    on that day, no .parquet part is among it (the old day prefix selected them all)."""
    _, export = change
    keys = _keys(export, dataset)
    assert any(k.endswith(".parquet") and f"date={DAY2}" in k for k in keys)
    text = warehouse.redshift(DATASETS[dataset], uri="s3://acme-exports/sequenzy", day=str(DAY2))
    (prefix,) = re.findall(r"^FROM 's3://acme-exports/sequenzy/([^']*)'$", text, re.M)
    assert not [k for k in keys if k.startswith(prefix) and not k.endswith(".jsonl.gz")], prefix
