"""The Snowflake statements of docs/customers.md, run on fakesnow over a real export with a format change,
and parsed by sqlglot's Snowflake dialect (`support.snowflake_emulator` says what fakesnow cannot run and
how each of those three things is checked instead)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from seqexport_dagster.contract import warehouse, warehouse_both, warehouse_parquet
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS, Dataset
from seqexport_dagster_tests.support import snowflake_emulator as sf
from seqexport_dagster_tests.support.format_change import DAY1, DAY2, ChangeExport, write_change_export
from seqexport_dagster_tests.support.world import World, sqlite_world


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, ChangeExport]]:
    with sqlite_world(tmp_path_factory.mktemp("change")) as world:
        yield world, write_change_export(world)


def _uri(export: ChangeExport) -> str:
    return f"file://{export.root}"


def _ids(cursor: Any, view: str) -> set[str]:
    cursor.execute(f"SELECT id FROM {view}")
    return {row[0] for row in cursor.fetchall()}


def jsonl(ds: Dataset, export: ChangeExport, day: str) -> str:
    return warehouse.snowflake(ds, uri=_uri(export), day=day)


def parquet(ds: Dataset, export: ChangeExport, day: str) -> str:
    return warehouse_parquet.snowflake(ds, uri=_uri(export), day=day)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_the_parquet_copy_loads_every_column_by_name(change: tuple[World, ChangeExport], dataset: str) -> None:
    """The old CASE_SENSITIVE matched the files' lower-case names against the table's upper-case ones: no
    column matched, and fakesnow, like Snowflake, refused NULL in the NOT NULL id."""
    _, export = change
    ds = DATASETS[dataset]
    with sf.session() as cursor:
        loaded = sf.run(cursor, parquet(ds, export, str(DAY2)), export.root)
        assert loaded and all(key.endswith(".parquet") for key in loaded)
        view = f"{dataset}_parquet"
        assert _ids(cursor, view) == export.ids(dataset, ".parquet", day=str(DAY2) if ds.is_snapshot else None)
        cursor.execute(f"SELECT count(*) FROM {dataset}_parquet_raw WHERE file IS NULL OR recorded_at IS NULL"
                       if not ds.is_snapshot else f"SELECT count(*) FROM {view} WHERE updated_at IS NULL")
        assert cursor.fetchone() == (0,)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_both_formats_run_side_by_side_and_the_view_over_both_has_every_row(
    change: tuple[World, ChangeExport], dataset: str
) -> None:
    """On the day of a change the JSONL and Parquet statements run over the same folders in one database:
    neither replaces the other's objects (the old ones shared ``<dataset>_raw`` and the view), and the
    view over both shows every id once; for the snapshot, the latest day whichever its format."""
    _, export = change
    ds = DATASETS[dataset]
    with sf.session() as cursor:
        for day in (DAY1, DAY2):
            sf.run(cursor, jsonl(ds, export, str(day)), export.root)
            sf.run(cursor, parquet(ds, export, str(day)), export.root)
        if ds.is_snapshot:
            assert _ids(cursor, "subscribers") == export.ids("subscribers", day=str(DAY1))  # the JSONL view
        sf.run(cursor, warehouse_both.snowflake(ds), export.root)
        both = _ids(cursor, dataset)
        if ds.is_snapshot:
            assert both == export.ids("subscribers", day=str(DAY2)) and export.deleted_subscriber not in both
        else:
            assert both == export.ids(dataset) and export.ids(dataset, ".jsonl.gz", day=str(DAY2))
            cursor.execute(f"SELECT count(*), count(DISTINCT id) FROM {dataset}")
            assert cursor.fetchone() == (len(both), len(both))
        # The same types from both formats: timestamps as instants, objects as VARIANT.
        column = "updated_at" if ds.is_snapshot else "recorded_at"
        cursor.execute(f"SELECT min({column}), max({column}) FROM {dataset}")
        low, high = cursor.fetchone()
        assert low.utcoffset().total_seconds() == 0 and low < high


def test_the_jsonl_copy_pattern_selects_jsonl_parts_only(change: tuple[World, ChangeExport]) -> None:
    """What the emulator applies stands for Snowflake's PATTERN: on the change day it matches the
    .jsonl.gz parts and never a .parquet part or _SUCCESS, and the Parquet one the reverse."""
    _, export = change
    for name in EVENT_DATASETS:
        ds = DATASETS[name]
        (jsonl_pattern,) = re.findall(r"PATTERN = '([^']*)'", warehouse.snowflake(ds))
        (parquet_pattern,) = re.findall(r"PATTERN = '([^']*)'", warehouse_parquet.snowflake(ds))
        day = f"{name}/date={DAY2}/"
        assert sf.copy_files(export.root, day, jsonl_pattern) == sorted(
            p.name for p in (export.root / day).iterdir() if p.name.endswith(".jsonl.gz")
        )
        assert sf.copy_files(export.root, day, parquet_pattern) == sorted(
            p.name for p in (export.root / day).iterdir() if p.name.endswith(".parquet")
        )
    snapshot = f"subscribers/date={DAY1}/"
    assert "_SUCCESS" in sf.copy_files(export.root, snapshot, ".*")
    loads = sf.copy_files(export.root, snapshot, jsonl_pattern)
    assert loads and all(k.endswith(".jsonl.gz") for k in loads)


def _parsed(text: str) -> list[exp.Expr]:
    return [sqlglot.parse_one(s, read="snowflake") for s in sf.statements(text)]


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_every_snowflake_statement_parses_and_names_its_own_objects(dataset: str) -> None:
    """sqlglot's Snowflake dialect parses each statement (no Command fallback), and the objects the two
    formats create are disjoint apart from the shared stage and file format."""
    ds = DATASETS[dataset]
    created: dict[str, set[str]] = {}
    for label, text in (
        ("jsonl", warehouse.snowflake(ds)),
        ("parquet", warehouse_parquet.snowflake(ds)),
        ("both", warehouse_both.snowflake(ds)),
    ):
        trees = _parsed(text)
        assert not [t for t in trees if isinstance(t, exp.Command)], label
        created[label] = {
            table.name.lower()
            for t in trees
            if isinstance(t, exp.Create) and t.kind in ("TABLE", "VIEW") and (table := t.find(exp.Table))
        }
    assert created["jsonl"] == {f"{dataset}_raw", dataset}
    assert created["parquet"] == {f"{dataset}_parquet_raw", f"{dataset}_parquet"}
    assert created["both"] == {f"{dataset}_raw", dataset}  # the JSONL table as it is; the view replaced


def test_the_parquet_copy_options_are_the_documented_ones() -> None:
    """COPY's copy options for Parquet, checked in the parsed tree: MATCH_BY_COLUMN_NAME takes
    CASE_SENSITIVE, CASE_INSENSITIVE or NONE, and only CASE_INSENSITIVE matches our lower-case files
    to unquoted (upper-case) columns."""
    for ds in DATASETS.values():
        (copy,) = [t for t in _parsed(warehouse_parquet.snowflake(ds)) if isinstance(t, exp.Copy)]
        params = {p.this.name.upper(): p for p in copy.args["params"]}
        assert params["MATCH_BY_COLUMN_NAME"].expression.name.upper() == "CASE_INSENSITIVE"
        assert set(params) == {"FILE_FORMAT", "MATCH_BY_COLUMN_NAME", "INCLUDE_METADATA", "PATTERN"}
        assert "METADATA$FILENAME" in params["INCLUDE_METADATA"].sql(dialect="snowflake")
