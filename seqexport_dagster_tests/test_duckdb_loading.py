"""The docs' DuckDB query, and our typed DuckDB view, run on a real export and agree with the source."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.warehouse import PARTITION_COLUMN, duckdb_type
from seqexport_dagster.contract.warehouse import duckdb as duckdb_view
from seqexport_dagster.contract.window import DAY_MS, iso_ms
from seqexport_dagster_tests.support.demo_export import ACCOUNT, write_demo_export
from seqexport_dagster_tests.support.world import DAY0, World, sqlite_world

EVENT_KIND = {"email_events": "event_type", "sms_events": "event_type", "custom_events": "name"}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, Path]]:
    with sqlite_world(tmp_path_factory.mktemp("duckdb")) as world:
        root, _ = write_demo_export(world, part_limit=200)
        yield world, root


def source_counts(world: World, dataset: str) -> dict[str, int]:
    """What the exported windows cover in the source: (DAY0, DAY0 + 1 day] of recorded time."""
    column = EVENT_KIND[dataset]
    sql = sa.text(
        f"SELECT {column}, count(*) FROM {dataset} WHERE account_id = :a "
        "AND recorded_at > :lo AND recorded_at <= :hi GROUP BY 1"
    )
    with world.source_engine.connect() as conn:
        rows = conn.execute(sql, {"a": ACCOUNT, "lo": iso_ms(DAY0), "hi": iso_ms(DAY0 + DAY_MS)}).all()
    return {kind: n for kind, n in rows}


def docs_query(root: Path, dataset: str) -> str:
    # Verbatim from the customer docs, with the local copy of the bucket as the root.
    column = EVENT_KIND[dataset]
    return (
        f"SELECT {column}, count(*), COUNT(DISTINCT id)\n"
        f"FROM read_json_auto('{root}/{dataset}/*/*.jsonl.gz',\n"
        f"                    hive_partitioning = true)\n"
        f"GROUP BY {column}"
    )


@pytest.mark.parametrize("dataset", list(EVENT_KIND))
def test_docs_query_counts_equal_the_source(export: tuple[World, Path], dataset: str) -> None:
    world, root = export
    expected = source_counts(world, dataset)
    assert sum(expected.values()) > 100
    got = duckdb.sql(docs_query(root, dataset)).fetchall()
    assert {kind: n for kind, n, _ in got} == expected
    assert {kind: distinct for kind, _, distinct in got} == expected  # no row twice


def test_email_funnel_has_every_event_type(export: tuple[World, Path]) -> None:
    world, _ = export
    assert set(source_counts(world, "email_events")) >= {"sent", "delivered", "opened", "clicked", "bounced"}


def test_hive_date_column_is_distinct_from_every_field(export: tuple[World, Path]) -> None:
    _, root = export
    for dataset in DATASETS:
        assert PARTITION_COLUMN not in {n.lower() for n in DATASETS[dataset].field_names}
        rel = duckdb.sql(f"SELECT * FROM read_json_auto('{root}/{dataset}/*/*.jsonl.gz', hive_partitioning = true)")
        assert rel.columns == [*DATASETS[dataset].field_names, PARTITION_COLUMN]
        dates = duckdb.sql(f"SELECT DISTINCT CAST({PARTITION_COLUMN} AS VARCHAR) FROM rel").fetchall()
        assert dates == [("2026-09-30",)]


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_typed_view_has_the_contract_types(export: tuple[World, Path], dataset: str) -> None:
    """The DuckDB view of docs/customers.md: declared column types, timestamps parsed exactly, one row per id."""
    world, root = export
    ds = DATASETS[dataset]
    con = duckdb.connect()
    con.execute(duckdb_view(ds, root=str(root)))
    described = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE {dataset}").fetchall()}
    expected = {f.name: duckdb_type(f).replace("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE") for f in ds.fields}
    assert {k: v for k, v in described.items() if k != PARTITION_COLUMN} == expected
    con.execute("SET TimeZone = 'UTC'")
    order = ", ".join(ds.order_by)
    column = "updated_at" if ds.is_snapshot else "recorded_at"
    # Printed back in the contract's format, every timestamp must equal the source text exactly.
    typed = con.execute(
        f"SELECT id, strftime({column}, '%Y-%m-%dT%H:%M:%S.%gZ') FROM {dataset} ORDER BY {order}"
    ).fetchall()
    where = "" if ds.is_snapshot else "AND recorded_at > :lo AND recorded_at <= :hi"
    with world.source_engine.connect() as conn:
        source = conn.execute(
            sa.text(f"SELECT id, {column} FROM {dataset} WHERE account_id = :a {where} ORDER BY {order}"),
            {"a": ACCOUNT, "lo": iso_ms(DAY0), "hi": iso_ms(DAY0 + DAY_MS)},
        ).all()
    assert typed == [tuple(r) for r in source]


def test_dedup_view_hides_a_row_written_twice(export: tuple[World, Path], tmp_path: Path) -> None:
    """At-least-once: a retry with a changed file count can repeat a row; the view shows it once."""
    world, root = export
    copy = tmp_path / "bucket"
    shutil.copytree(root, copy)
    part = sorted((copy / "email_events").rglob("*-0000.jsonl.gz"))[3]
    lines = gzip.decompress(part.read_bytes()).splitlines()
    part.write_bytes(gzip.compress(b"\n".join([*lines, lines[0]]) + b"\n"))
    (raw,) = duckdb.sql(f"SELECT count(*) FROM read_json_auto('{copy}/email_events/*/*.jsonl.gz')").fetchall()
    con = duckdb.connect()
    con.execute(duckdb_view(DATASETS["email_events"], root=str(copy)))
    ((deduped,),) = con.execute("SELECT count(*) FROM email_events").fetchall()
    total = sum(source_counts(world, "email_events").values())
    assert raw == (total + 1,) and deduped == total
    assert json.loads(lines[0])["id"]
