"""Delta Lake tables (issue 44): the log written beside the Parquet parts, read by delta-rs and DuckDB.

End to end through the local moto server (a plain bucket with ``If-None-Match`` and a create-only GCS
one, under lost replies and resets on the log's own files): delta-rs (``deltalake``) and DuckDB's
``delta`` extension read each table, and both hold exactly the rows the Parquet parts hold, each
once, equal to the source. In a local folder: late rows get their own commit, an operator's replace
re-adds the parts it overwrote and removes those it emptied, still exactly once; checkpoints are
read without ``_last_checkpoint``; `verify` checks the log.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from seqexport_dagster.contract import warehouse_parquet
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.verify import LocalBucket, verify_bucket
from seqexport_dagster.management.verify.table import verify_tables
from seqexport_dagster_tests.support import duckdb_httpfs
from seqexport_dagster_tests.support import snowflake_emulator as sf
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.cli_harness import run_fixture  # noqa: F401 - the `run` fixture
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import s3_export, s3_runner
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
LAG = 120_000
SMALL = Scale(subscribers=40, email_sends_per_hour=20, sms_sends_per_hour=4, custom_per_hour=10)
TABLED = ("email_events", "custom_events", "subscribers")


def table_ids(root: Path) -> list[str]:
    return [str(i) for i in DeltaTable(str(root)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()]


def duckdb_counts(roots: list[Path]) -> list[list[str]]:
    queries = [f"SELECT count(*), count(DISTINCT id) FROM delta_scan('{r}')" for r in roots]
    out = duckdb_httpfs.run(["SET enable_progress_bar = false"], queries, extensions=("delta",))
    return [rows[0] for rows in out["results"]]


def source_ids(world: World, dataset: str, until_ms: int) -> set[str]:
    """The source's rows the export owes up to its position (the snapshot: every subscriber)."""
    with world.source_engine.connect() as conn:
        if dataset == "subscribers":
            rows = conn.execute(sa.text("SELECT id FROM subscribers WHERE account_id = 'acme'")).all()
        else:
            rows = conn.execute(
                sa.text(
                    f"SELECT id FROM {dataset} WHERE account_id = 'acme' AND recorded_at > :a AND recorded_at <= :b"
                ),
                {"a": iso_ms(DAY0), "b": iso_ms(until_ms)},
            ).all()
    return {r[0] for r in rows}


def run_hours(world: World, runner: Any, export_id: str, hours: int, datasets: tuple[str, ...]) -> None:
    for h in range(1, hours + 1):
        world.clock.now_ms = DAY0 + h * HOUR_MS + LAG
        for dataset in datasets:
            if dataset != "subscribers":
                runner.run_day(export_id, dataset, DAY)


def test_the_log_is_the_protocol_and_a_table_needs_parquet(world: World) -> None:
    body = delta_log.commit_body(
        version=0,
        dataset="custom_events",
        table="t",
        app_id="exp_1",
        txn=7,
        adds=[delta_log.TableFile("date=2026-09-30/custom_events-1-2-0000.parquet", "2026-09-30", 10, 3, 1, 2)],
        removes=[],
        now_ms=5,
    )
    actions = [json.loads(line) for line in body.decode().splitlines()]
    kinds = [next(iter(a)) for a in actions]
    assert kinds == ["commitInfo", "protocol", "metaData", "txn", "add"]
    assert actions[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert actions[2]["metaData"]["partitionColumns"] == ["date"]
    assert actions[3]["txn"] == {"appId": "exp_1", "version": 7, "lastUpdated": 5}
    add = actions[4]["add"]
    assert add["partitionValues"] == {"date": "2026-09-30"} and add["dataChange"] is True
    assert json.loads(add["stats"])["numRecords"] == 3
    assert delta_log.commit_key("p", "sms_events", 12) == "p/sms_events/_delta_log/00000000000000000012.json"
    api = Exports(world.store, world.policy, clock=world.clock)
    export = world.local_export(datasets=("custom_events",))
    with pytest.raises(InvalidInput, match="table.*parquet"):
        api.change_table(export.id, "delta")
    with pytest.raises(InvalidInput, match="table"):
        api.change_table(export.id, "iceberg")
    api.change_format(export.id, "parquet")
    assert api.change_table(export.id, "delta").table == "delta"
    with pytest.raises(InvalidInput, match="table.*parquet"):
        api.change_format(export.id, "jsonl.gz")


def test_late_rows_replaces_and_checkpoints_keep_every_row_once(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + DAY_MS, scale=SMALL)
    export = world.local_export(datasets=("custom_events",), file_format="parquet", frequency="1h")
    world.store.set_table(export.id, "delta", world.clock())
    root = world.root / "bucket"
    table = root / "custom_events"
    runner = world.runner(part_limit=4, checkpoint_interval=3)
    run_hours(world, runner, export.id, 6, ("custom_events",))
    # A late row inside the first window: its own part, its own commit.
    with world.source_engine.connect() as conn:
        row = list(
            conn.execute(
                sa.text("SELECT * FROM custom_events WHERE recorded_at > :a ORDER BY recorded_at LIMIT 1"),
                {"a": "2026-09-30T00:00:00.000Z"},
            ).one()
        )
    row[1] = row[1] + "_late"
    insert_rows(world.source_engine, "custom_events", [tuple(row)])
    first = Window(DAY0, DAY0 + HOUR_MS)
    runner.write_window(export.id, "custom_events", first, late_only=True)
    expected = source_ids(world, "custom_events", DAY0 + 6 * HOUR_MS)
    ids = table_ids(table)
    assert len(ids) == len(set(ids)) and set(ids) == expected
    # An operator's replace of the first window with a wider cut: fewer parts, the rest emptied.
    world.store.set_table(export.id, "delta", world.clock())
    wide = world.runner(part_limit=50, checkpoint_interval=3)
    wide.write_window(export.id, "custom_events", first, replace=True)
    ids = table_ids(table)
    assert len(ids) == len(set(ids)) and set(ids) == expected
    log = sorted(p.name for p in (table / "_delta_log").iterdir())
    assert any(n.endswith(".checkpoint.parquet") for n in log) and "_last_checkpoint" not in log
    removes = [
        json.loads(line)
        for n in log
        if n.endswith(".json")
        for line in (table / "_delta_log" / n).read_text().splitlines()
        if line.startswith('{"remove"')
    ]
    assert removes, "the replace emptied parts: they leave the table"
    [(count, distinct)] = duckdb_counts([table])
    assert int(count) == int(distinct) == len(expected)
    _the_docs_parquet_statements_read_parts_never_checkpoints(root, "custom_events", expected)
    assert verify_tables(LocalBucket(root), ledger=(world.store, export.id)) == []
    report = verify_bucket(LocalBucket(root), ledger=(world.store, export.id), workers=1)
    assert report.ok, report.problems
    # verify sees a gap in the log and a file the log adds that is not there.
    (table / "_delta_log" / "00000000000000000001.json").unlink()
    sorted(table.glob("date=*/*-0000.parquet"))[-1].unlink()
    kinds = {p.kind for p in verify_bucket(LocalBucket(root), workers=1).problems}
    assert {"table_version_gap", "table_file_missing"} <= kinds, kinds


def _the_docs_parquet_statements_read_parts_never_checkpoints(root: Path, dataset: str, expected: set[str]) -> None:
    """A checkpoint is a Parquet file in the dataset folder: the customer docs' Parquet statements
    (`contract.warehouse_parquet`) select the parts of the ``date=`` folders only. A glob over
    ``*/*.parquet`` reads the checkpoint too, and DuckDB refuses it (before the fix, the docs' query)."""
    parts = sorted(p.relative_to(root / dataset).as_posix() for p in (root / dataset).glob("date=*/*.parquet"))
    keys = sorted(p.relative_to(root / dataset).as_posix() for p in (root / dataset).rglob("*") if p.is_file())
    assert any(k.startswith("_delta_log/") and k.endswith(".checkpoint.parquet") for k in keys)
    ds = DATASETS[dataset]
    # Snowflake: the COPY's PATTERN, applied as a bulk COPY does (the whole path).
    (pattern,) = re.findall(r"PATTERN = '([^']*)'", warehouse_parquet.snowflake(ds))
    assert sf.copy_files(root, f"{dataset}/", pattern) == parts
    # BigQuery: the external table's one wildcard, which matches slashes too (as fnmatch's `*`).
    (uri,) = re.findall(r"uris = \['gs://acme-exports/sequenzy/([^']*)'\]", warehouse_parquet.bigquery(ds))
    assert sorted(k for k in (f"{dataset}/{k}" for k in keys) if fnmatch.fnmatchcase(k, uri)) == [
        f"{dataset}/{p}" for p in parts
    ]
    # DuckDB: the docs' view over the folder, each id once, exactly the source's.
    con = duckdb.connect()
    con.execute(warehouse_parquet.duckdb(ds, root=str(root)))
    ids = [r[0] for r in con.execute(f"SELECT id FROM {dataset}_parquet").fetchall()]
    assert len(ids) == len(set(ids)) and set(ids) == expected
    with pytest.raises(duckdb.Error, match="[Hh]ive partition"):
        con.execute(f"SELECT count(*) FROM read_parquet('{root}/{dataset}/*/*.parquet', hive_partitioning = true)")


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Any:
    server = fp.FaultProxy(moto.port, write_once=request.param == "write-once")
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        server.close()


def test_delta_rs_and_duckdb_read_the_table_from_moto_and_agree_with_the_source(
    world: World, moto: Any, proxy: Any, tmp_path: Path
) -> None:
    s3 = moto.admin_client()
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + DAY_MS, scale=SMALL)
    export = s3_export(world, s3, proxy, datasets=TABLED, file_format="parquet")
    world.store.set_table(export.id, "delta", world.clock())
    runner = s3_runner(world, part_limit=15, max_attempts=2)
    # Lost answers and a reset on the log's own files: the re-send is recognised, never an overwrite.
    proxy.add(fp.lost_reply(match="_delta_log/00000000000000000001.json", times=1))
    proxy.add(fp.reset(match="_delta_log/00000000000000000002.json", times=1))
    for _attempt in range(4):
        errors = 0
        for h in range(1, 5):
            world.clock.now_ms = max(world.clock.now_ms, DAY0 + h * HOUR_MS + LAG)
            for dataset in ("email_events", "custom_events"):
                try:
                    runner.run_day(export.id, dataset, DAY)
                except Exception:
                    errors += 1
        if not errors:
            break
    world.clock.now_ms = DAY0 + DAY_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "subscribers", DAY)
    audit_export(world.store, world.source_engine, s3, export.id).assert_clean()
    bucket = world.store.get_export(export.id).bucket
    local = tmp_path / "copy"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="sequenzy/"):
        for obj in page.get("Contents", []):
            path = local / obj["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
    roots = [local / "sequenzy" / d for d in TABLED]
    position = world.store.get_export(export.id).dataset_state("email_events")
    assert position is not None and position.position_ms >= DAY0 + 4 * HOUR_MS
    counts = duckdb_counts(roots)
    for dataset, root, (count, distinct) in zip(TABLED, roots, counts, strict=True):
        ids = table_ids(root)
        until = world.store.get_export(export.id).dataset_state(dataset)
        assert until is not None
        expected = source_ids(world, dataset, until.position_ms)
        assert len(ids) == len(set(ids)) and set(ids) == expected, dataset
        assert int(count) == int(distinct) == len(expected), dataset
    assert not (local / "sequenzy" / "email_events" / "_delta_log" / "_last_checkpoint").exists()
    # Straight from the S3 server too: each reader lists the log itself (no _last_checkpoint).
    s3_root = f"s3://{bucket}/sequenzy/email_events"
    options = {
        "AWS_ENDPOINT_URL": moto.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    direct = DeltaTable(s3_root, storage_options=options).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(map(str, direct)) == sorted(table_ids(roots[0]))
    secret = (
        "CREATE SECRET moto (TYPE s3, KEY_ID 'testing', SECRET 'testing', REGION 'us-east-1', "
        f"ENDPOINT '127.0.0.1:{moto.port}', URL_STYLE 'path', USE_SSL false)"
    )
    # And the docs' own DuckDB statement (docs/customers.md, "Reading the table"), at this table.
    docs = (Path(__file__).resolve().parent.parent / "docs" / "customers.md").read_text()
    documented = next(
        line for line in docs.splitlines() if line.startswith("SELECT event_type, count(*) FROM delta_scan(")
    )
    out = duckdb_httpfs.run(
        ["SET enable_progress_bar = false", secret],
        [
            f"SELECT count(*), count(DISTINCT id) FROM delta_scan('{s3_root}')",
            documented.replace("s3://acme-exports/sequenzy/email_events", s3_root),
        ],
        extensions=("httpfs", "delta"),
    )
    assert out["results"][0][0] == [str(len(direct))] * 2
    assert sum(int(count) for _, count in out["results"][1]) == len(direct)
    copy = LocalBucket(local / "sequenzy")
    assert len([o for o in copy.list() if "/_delta_log/" in o.key]) >= 3
    assert verify_tables(copy, ledger=(world.store, export.id)) == []

    assert set(EVENT_DATASETS) >= {"email_events", "custom_events"}


def test_the_cli_and_the_http_api_set_the_table_and_name_the_field_when_they_cannot(run: Any) -> None:
    """Through `seqexport` locally, on PostgreSQL and against the HTTP API (the remote CLI): the
    same answers, the same refusals (exit 2, naming ``table``), the same ``describe``."""
    created = run.create_local("tb", "--datasets", "custom_events", "--format", "parquet", "--table", "delta")
    assert created["table"] == "delta" and run.world.store.get_export(created["id"]).table == "delta"
    assert run.ok("status", created["id"])["table"] == "delta"
    assert [e["table"] for e in run.ok("list")] == ["delta"]
    described = [line.split() for line in run("status", created["id"]).out.splitlines()]
    assert ["table", "delta", "(a", "Delta", "Lake", "log", "per", "dataset)"] in described
    refused = run("format", created["id"], "jsonl.gz", "--json")
    assert refused.code == 2 and refused.json["error"]["field"] == "table", refused
    assert "turn the table off first" in refused.json["error"]["message"]
    assert run.world.store.get_export(created["id"]).format == "parquet"  # refused: nothing changed
    off = run("table", created["id"], "none")
    assert off.code == 0 and "now keeps no table" in off.out, off
    assert run.world.store.get_export(created["id"]).table is None
    assert not [line for line in run("status", created["id"]).out.splitlines() if line.startswith("table ")]
    assert run.ok("table", created["id"], "delta")["table"] == "delta"  # on again: the log continues
    bad = run("table", created["id"], "iceberg", "--json")
    assert bad.code == 2 and bad.json["error"]["field"] == "table"
    assert "'iceberg' is not a table format; use delta (with format parquet) or none" in bad.json["error"]["message"]
    run.ok("table", created["id"], "none")
    assert run.ok("format", created["id"], "jsonl.gz")["format"] == "jsonl.gz"
    jsonl = run("table", created["id"], "delta", "--json")
    assert jsonl.code == 2 and jsonl.json["error"]["field"] == "table"
    assert "change the format to parquet first" in jsonl.json["error"]["message"]
    without = run("create", "--account", "acme", "--provider", "local", "--bucket", str(run.world.root / "x"),
                  "--table", "delta", "--json")  # fmt: skip
    assert without.code == 2 and without.json["error"]["field"] == "table"
    assert "needs the parquet format, not jsonl.gz" in without.json["error"]["message"]
    assert len(run.world.store.list_exports()) == 1
