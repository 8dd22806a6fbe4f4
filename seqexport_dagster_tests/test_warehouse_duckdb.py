"""Every DuckDB statement of docs/customers.md, run by DuckDB on a real export with a format change in it:
the JSONL views, the Parquet views and the view over both, on local folders (DuckDB 2.0) and on ``s3://``
through ``httpfs`` against the moto server (DuckDB 1.5.5, the release its PyPI extension is built for).

The export (`support.format_change`) has a JSONL day, a day whose event folders hold both kinds of part,
and two snapshot days, one per format, with a subscriber deleted upstream in between.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract import warehouse, warehouse_both, warehouse_parquet
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster_tests.support import duckdb_httpfs
from seqexport_dagster_tests.support.format_change import ACCOUNT, DAY1, DAY2, ChangeExport, write_change_export
from seqexport_dagster_tests.support.moto_server import ADMIN_KEY, ADMIN_SECRET, MotoServer
from seqexport_dagster_tests.support.world import World, sqlite_world

JSONL, PARQUET = ".jsonl.gz", ".parquet"


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, ChangeExport]]:
    with sqlite_world(tmp_path_factory.mktemp("change")) as world:
        yield world, write_change_export(world)


def _views(root: str) -> list[str]:
    """The JSONL views (renamed ``jsonl_<dataset>``: the view over both takes the dataset's own name, as
    it does in the docs), the Parquet views, then the views over both."""
    jsonl = [
        warehouse.duckdb(ds, root=root).replace("CREATE OR REPLACE VIEW ", "CREATE OR REPLACE VIEW jsonl_", 1)
        for ds in DATASETS.values()
    ]
    parquet = [warehouse_parquet.duckdb(ds, root=root) for ds in DATASETS.values()]
    return jsonl + parquet + [warehouse_both.duckdb(ds, root=root) for ds in DATASETS.values()]


def _ids(con: duckdb.DuckDBPyConnection, view: str) -> set[str]:
    return {row[0] for row in con.execute(f"SELECT id FROM {view}").fetchall()}


def _source_subscribers(world: World) -> set[str]:
    with world.source_engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id FROM subscribers WHERE account_id = :a"), {"a": ACCOUNT}).all()
    return {r[0] for r in rows}


@pytest.mark.parametrize("dataset", list(EVENT_DATASETS))
def test_each_format_view_reads_its_own_parts_and_the_view_over_both_reads_all(
    change: tuple[World, ChangeExport], dataset: str
) -> None:
    _, export = change
    con = duckdb.connect()
    for statement in _views(str(export.root)):
        con.execute(statement)
    jsonl, parquet = export.ids(dataset, JSONL), export.ids(dataset, PARQUET)
    assert jsonl and parquet and not jsonl & parquet
    assert export.ids(dataset, JSONL, day=DAY2) and export.ids(dataset, PARQUET, day=DAY2), "a format-change day"
    assert _ids(con, f"jsonl_{dataset}") == jsonl
    assert _ids(con, f"{dataset}_parquet") == parquet
    assert _ids(con, dataset) == jsonl | parquet
    (n,) = con.execute(f"SELECT count(*) FROM {dataset}").fetchone() or (0,)
    assert n == len(jsonl | parquet), "each id once"
    # The same contract types whichever format a row came from.
    kinds = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {dataset})").fetchall())
    assert kinds["recorded_at"] == "TIMESTAMP WITH TIME ZONE" and kinds["date"] == "DATE"
    by_day = dict(con.execute(f"SELECT CAST(date AS VARCHAR), count(*) FROM {dataset} GROUP BY 1").fetchall())
    assert set(by_day) == {str(DAY1), str(DAY2)}


def test_the_snapshot_views_show_the_latest_complete_day_only(change: tuple[World, ChangeExport]) -> None:
    """Day 1 is JSONL, day 2 Parquet, one subscriber deleted in between: the view over both shows day 2,
    exactly the source's subscribers now; the JSONL view shows none of day 1 (it is not the latest)."""
    world, export = change
    con = duckdb.connect()
    for statement in _views(str(export.root)):
        con.execute(statement)
    assert export.deleted_subscriber in export.ids("subscribers", day=DAY1)
    assert _ids(con, "subscribers") == export.ids("subscribers", day=DAY2) == _source_subscribers(world)
    assert export.deleted_subscriber not in _ids(con, "subscribers")
    assert _ids(con, "subscribers_parquet") == export.ids("subscribers", day=DAY2)
    assert _ids(con, "jsonl_subscribers") == set()


@pytest.mark.parametrize("file_format", ["jsonl.gz", "parquet"])
def test_a_deleted_subscriber_leaves_with_the_next_snapshot_day(tmp_path: Path, file_format: str) -> None:
    """The old JSONL view kept the latest row of every id across all days: a deleted subscriber stayed."""
    with sqlite_world(tmp_path) as world:
        export = write_change_export(world, first=file_format, then=file_format)  # type: ignore[arg-type]
        make = warehouse.duckdb if file_format == "jsonl.gz" else warehouse_parquet.duckdb
        view = "subscribers" if file_format == "jsonl.gz" else "subscribers_parquet"
        con = duckdb.connect()
        con.execute(make(DATASETS["subscribers"], root=str(export.root)))
        assert export.deleted_subscriber in export.ids("subscribers", day=DAY1)
        assert _ids(con, view) == export.ids("subscribers", day=DAY2) == _source_subscribers(world)
        # A day without its _SUCCESS is not complete: the view stays on the last complete day.
        (export.root / "subscribers" / f"date={DAY2}" / "_SUCCESS").unlink()
        assert _ids(con, view) == export.ids("subscribers", day=DAY1)


def test_the_docs_query_runs_on_the_jsonl_parts(change: tuple[World, ChangeExport]) -> None:
    _, export = change
    got = duckdb.sql(docs_query(str(export.root))).fetchall()
    assert sum(n for _, n in got) == len(export.ids("email_events", JSONL))


def docs_query(root: str) -> str:
    """The first DuckDB block of docs/customers.md, with the bucket's root replaced."""
    return (
        "SELECT event_type, COUNT(DISTINCT id)\n"
        f"FROM read_json_auto('{root}/email_events/*/*.jsonl.gz',\n"
        "                    hive_partitioning = true)\n"
        "GROUP BY event_type;"
    )


def secret(moto: MotoServer) -> str:
    """The docs' CREATE SECRET block as written, with moto's key and the three options the docs give for
    an S3-compatible store served over plain HTTP (a local MinIO; here moto). ``INSTALL`` and ``LOAD``
    are replaced by the LOAD of the packaged extension (`support.duckdb_httpfs`)."""
    doc = (Path(__file__).parents[1] / "docs" / "customers.md").read_text()
    section = doc[doc.index("#### Reading `s3://` and `gs://` from DuckDB") :]
    block = re.search(r"```sql\n(.*?)\n```", section, re.S)
    assert block is not None
    create = block[1][block[1].index("CREATE SECRET") :]
    assert "KEY_ID 'AKIA...'" in create and "SECRET '...'" in create, "the docs' secret changed"
    local = f"    SCOPE 's3://acme-exports/sequenzy',\n    ENDPOINT '127.0.0.1:{moto.port}',\n    URL_STYLE 'path',\n    USE_SSL false"
    return (
        create.replace("KEY_ID 'AKIA...'", f"KEY_ID '{ADMIN_KEY}'")
        .replace("SECRET '...'", f"SECRET '{ADMIN_SECRET}'")
        .replace("    SCOPE 's3://acme-exports/sequenzy'", local)
    )


def test_every_duckdb_statement_runs_on_s3_through_httpfs(
    change: tuple[World, ChangeExport], moto: MotoServer
) -> None:
    """The same statements over ``s3://acme-exports/sequenzy`` on the moto server return what they
    return on the local folder, for both formats, the format-change day and the view over both."""
    _, export = change
    s3 = moto.admin_client()
    try:
        s3.create_bucket(Bucket="acme-exports")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    for path in export.root.rglob("*"):
        if path.is_file():
            key = f"sequenzy/{path.relative_to(export.root).as_posix()}"
            s3.put_object(Bucket="acme-exports", Key=key, Body=path.read_bytes())
    root = "s3://acme-exports/sequenzy"
    views = _views(root)
    queries = [f"SELECT id FROM {view} ORDER BY id" for view in _view_names()] + [docs_query(root)]
    remote = duckdb_httpfs.run([secret(moto), *views], queries)
    assert remote["version"] == "1.5.5"
    local = duckdb.connect()
    for statement in _views(str(export.root)):
        local.execute(statement)
    for view, rows in zip(_view_names(), remote["results"], strict=False):
        assert {r[0] for r in rows} == _ids(local, view), view
        if view != "jsonl_subscribers":  # its latest complete day is a Parquet day
            assert rows, view
    docs = remote["results"][-1]
    assert sum(int(n) for _, n in docs) == len(export.ids("email_events", JSONL))


def _view_names() -> list[str]:
    return [f"jsonl_{d}" for d in DATASETS] + [f"{d}_parquet" for d in DATASETS] + list(DATASETS)
