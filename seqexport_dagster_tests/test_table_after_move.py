"""Late rows stranded at a place the export left: in the Delta table at the new place (issue 44).

An export in Parquet with ``--table delta`` delivers six hours at prefix ``old`` of a moto bucket
(behind the fault proxy, as a create-only GCS key). Late rows of the 02:00-03:00 window then go out
as its part 0001 there, and the attempt ends before that place's table takes them: either every PUT
of its table commit meets 503 SlowDown, or the run worker is lost right after the part landed.
The export moves to prefix ``new`` before any retry at ``old``. The rows count as delivered (the
files at ``old`` hold them) and nothing is ever written at ``old`` again, so until this change they
were in neither table (long run #12 seed 40000120, then a documented limit). Now the first run at
``new`` cuts that part again from the source (the same bytes) as a table-only file under
``new/email_events/_delta_rows/``, which no documented file glob selects, and adds it to the new
table: the two tables hold every row of the source exactly once, delta-rs and DuckDB alike, and
``verify`` accepts both places.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from seqexport_dagster.contract import warehouse_parquet
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window, day_of, iso_ms
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.delivery.writer import unpack_ids
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import ExportError
from seqexport_dagster.management.verify import LocalBucket, verify_bucket
from seqexport_dagster.management.verify import table as verify_table
from seqexport_dagster.management.verify.table import verify_tables
from seqexport_dagster_tests.support import duckdb_httpfs
from seqexport_dagster_tests.support import snowflake_emulator as sf
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import new_bucket, s3_export, s3_runner
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

DATASET = "email_events"
SCALE = Scale(subscribers=20, email_sends_per_hour=10, sms_sends_per_hour=0, custom_per_hour=0)
LATE = Window(DAY0 + 2 * HOUR_MS, DAY0 + 3 * HOUR_MS)
LATE_PART = f"date={LATE.date_key}/{DATASET}-{LATE.from_ms}-{LATE.to_ms}-0001.parquet"
TABLE_ONLY = f"_delta_rows/{LATE.date_key}/{DATASET}-{LATE.from_ms}-{LATE.to_ms}-0001.parquet"


class WorkerLost(BaseException):
    """The run worker dies (not an `Exception`: nothing in the run may catch it)."""


def keys_under(s3: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def copy_out(objects: dict[str, bytes], root: Path) -> None:
    for key, body in objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def table_ids(root: Path) -> list[str]:
    return [str(i) for i in DeltaTable(str(root)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()]


def source_ids(world: World, until_ms: int) -> set[str]:
    with world.source_engine.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT id FROM {DATASET} WHERE account_id = 'acme' AND recorded_at > :a AND recorded_at <= :b"),
            {"a": iso_ms(DAY0), "b": iso_ms(until_ms)},
        ).all()
    return {r[0] for r in rows}


@pytest.mark.parametrize("ending", ["table commit refused", "worker lost"])
def test_late_rows_stranded_at_the_old_place_are_in_the_new_table_once(
    world: World, moto: Any, tmp_path: Path, ending: str
) -> None:
    s3 = moto.admin_client()
    proxy = fp.FaultProxy(moto.port, write_once=True)
    try:
        generate_account(world.source_engine, "acme", DAY0, DAY0 + 10 * HOUR_MS, scale=SCALE)
        bucket = new_bucket(s3)
        export = s3_export(world, s3, proxy, datasets=(DATASET,), prefix="old", bucket=bucket, file_format="parquet")
        world.store.set_table(export.id, "delta", world.clock())
        runner = s3_runner(world, part_limit=1000, max_attempts=1)
        day = day_of(DAY0)
        for hour in range(1, 7):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + 120_000
            runner.run_day(export.id, DATASET, day)
        # A scheduled pass (lateness one hour): from here on, scheduled passes reach back from it only.
        reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        late = late_rows(LATE, 3, "stranded")
        insert_rows(world.source_engine, DATASET, late)
        world.clock.now_ms += 5 * MINUTE_MS

        # Reconciliation lands part 0001 at `old`; the attempt ends before that table's commit.
        if ending == "table commit refused":
            refused = proxy.add(fp.slow_down(match="old/email_events/_delta_log/", times=None))
            with pytest.raises(ExportError, match="SlowDown"):
                reconcile(runner, export.id, retry_delays_s=())
            proxy.remove(refused)
        else:
            location = world.store.get_export(export.id).location

            def before_file(_export_id: str) -> None:
                # The next file after the late part landed (its manifest): the worker is gone.
                if any(
                    p.number == 1 and p.landed for p in world.store.window_parts(export.id, DATASET, LATE, location)
                ):
                    raise WorkerLost

            runner.before_file = before_file
            with pytest.raises(WorkerLost):
                reconcile(runner, export.id, retry_delays_s=())
            runner.before_file = None
        old = keys_under(s3, bucket, "old/")
        assert f"old/{DATASET}/{LATE_PART}" in old
        copy_out(old, tmp_path / "old")
        old_table = table_ids(tmp_path / "old" / "old" / DATASET)
        assert not {r[1] for r in late} & set(old_table), "the old table took the late rows after all"

        # The move, before any retry at `old`; then two hours at `new`, each with its scheduled pass,
        # which reaches back to 05:00 only: the window is looked at because its part landed at `old`
        # under an attempt no commit there followed (or, on a refused commit, as the error's window).
        config, _ = world.store.destination_config(export.id)
        world.clock.now_ms = DAY0 + 6 * HOUR_MS + 45 * MINUTE_MS
        world.store.update_destination(export.id, dataclasses.replace(config, prefix="new"), world.clock())
        for hour in (7, 8):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + 120_000
            runner.run_day(export.id, DATASET, day)
            reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        assert keys_under(s3, bucket, "old/") == old, "something was written at the old place after the move"
        new = keys_under(s3, bucket, "new/")
        copy_out(new, tmp_path / "new")
        root = tmp_path / "new" / "new" / DATASET
        new_table = table_ids(root)

        # Exactly once as a table: each table holds a row once, and together they hold the source.
        position = world.store.get_export(export.id).dataset_state(DATASET)
        assert position is not None and position.position_ms == DAY0 + 8 * HOUR_MS
        assert len(new_table) == len(set(new_table)) and len(old_table) == len(set(old_table))
        assert {r[1] for r in late} <= set(new_table)
        assert sorted(old_table + new_table) == sorted(source_ids(world, position.position_ms))
        # The table-only file is the old part's bytes (a re-cut is byte-reproducible), once.
        assert new[f"new/{DATASET}/{TABLE_ONLY}"] == old[f"old/{DATASET}/{LATE_PART}"]
        assert [k for k in new if "/_delta_rows/" in k] == [f"new/{DATASET}/{TABLE_ONLY}"]

        # DuckDB's delta extension reads the same table straight from the S3 server.
        secret = (
            "CREATE SECRET moto (TYPE s3, KEY_ID 'testing', SECRET 'testing', REGION 'us-east-1', "
            f"ENDPOINT '127.0.0.1:{moto.port}', URL_STYLE 'path', USE_SSL false)"
        )
        s3_root = f"s3://{bucket}/new/{DATASET}"
        out = duckdb_httpfs.run(
            ["SET enable_progress_bar = false", secret],
            [
                f"SELECT count(*), count(DISTINCT id) FROM delta_scan('{s3_root}')",
                f"SELECT count(*) FROM delta_scan('{s3_root}') WHERE id LIKE 'eev_stranded_%' AND date = '{LATE.date_key}'",
            ],
            extensions=("httpfs", "delta"),
        )
        assert out["results"][0][0] == [str(len(new_table))] * 2
        assert out["results"][1][0] == [str(len(late))]

        # No file loader sees the table-only file: the docs' DuckDB view, Snowflake PATTERN (on the
        # whole path) and BigQuery wildcard read the parts of the `date=` folders only.
        ds = DATASETS[DATASET]
        keys = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        parts = sorted(k for k in keys if k.startswith("date="))
        (pattern,) = re.findall(r"PATTERN = '([^']*)'", warehouse_parquet.snowflake(ds))
        assert sf.copy_files(root.parent, f"{DATASET}/", pattern) == parts
        (uri,) = re.findall(r"uris = \['gs://acme-exports/sequenzy/([^']*)'\]", warehouse_parquet.bigquery(ds))
        assert [k for k in keys if fnmatch.fnmatchcase(f"{DATASET}/{k}", uri)] == parts
        con = duckdb.connect()
        con.execute(warehouse_parquet.duckdb(ds, root=str(root.parent)))
        loaded = [r[0] for r in con.execute(f"SELECT id FROM {DATASET}_parquet").fetchall()]
        assert not {r[1] for r in late} & set(loaded)

        # `verify` accepts both places, the new one with the ledger too (files and table).
        assert verify_bucket(LocalBucket(tmp_path / "new" / "new"), workers=1).problems == []
        checked = verify_bucket(LocalBucket(tmp_path / "new" / "new"), ledger=(world.store, export.id), workers=1)
        assert checked.problems == []
        assert verify_tables(LocalBucket(tmp_path / "new" / "new"), ledger=(world.store, export.id)) == []

        # And it reads the table-only file: another body there is found by its size and its footer.
        other = old[f"old/{DATASET}/{LATE_PART.replace('-0001.', '-0000.')}"]
        (root / TABLE_ONLY).write_bytes(other)
        kinds = {p.kind for p in verify_tables(LocalBucket(tmp_path / "new" / "new"))}
        assert {"table_size_mismatch", "table_rows_mismatch"} <= kinds, kinds
        (root / TABLE_ONLY).write_bytes(b"not parquet")
        kinds = {p.kind for p in verify_tables(LocalBucket(tmp_path / "new" / "new"))}
        assert {"table_size_mismatch", "corrupt_parquet"} <= kinds, kinds
        assert verify_table.ROWS == delta_log.ROWS_FOLDER  # the folder's name, in verify and in the writer

        # Idempotent: one more pass finds nothing stranded and writes nothing.
        world.clock.now_ms += 10 * MINUTE_MS
        reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        assert keys_under(s3, bucket, "new/") == new
        assert proxy.overwrites == []
    finally:
        proxy.close()


@pytest.mark.parametrize("ending", ["after its remove", "after its first overwrite"])
def test_a_replace_left_unfinished_at_the_old_place_is_in_the_new_table_once(
    world: World, moto: Any, tmp_path: Path, ending: str
) -> None:
    """An operator's replace of the 02:00-03:00 window at ``old`` (whose late rows went out as its
    part 0001 there, in that table) commits the ``remove`` of the window's files from the old
    table, and its run worker is lost: right after that commit, or after its new part 0000 (every
    row of the window, the late ones too) overwrote the old one and before it blanked part 0001,
    so the ledger there holds the late rows twice. The export moves before any run finishes the
    replace there (long run #13 seeds 53000044, 53000047: rows then in no table, a documented
    limit). The first pass at ``new`` takes the window into the new table whole, each row once,
    as table-only files cut by id: the two tables hold every row of the source exactly once."""
    s3 = moto.admin_client()
    proxy = fp.FaultProxy(moto.port, write_once=True)
    try:
        generate_account(world.source_engine, "acme", DAY0, DAY0 + 10 * HOUR_MS, scale=SCALE)
        bucket = new_bucket(s3)
        export = s3_export(world, s3, proxy, datasets=(DATASET,), prefix="old", bucket=bucket, file_format="parquet")
        world.store.set_table(export.id, "delta", world.clock())
        runner = s3_runner(world, part_limit=1000, max_attempts=1)
        day = day_of(DAY0)
        for hour in range(1, 7):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + 120_000
            runner.run_day(export.id, DATASET, day)
        reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        late = late_rows(LATE, 3, "replaced")
        insert_rows(world.source_engine, DATASET, late)
        world.clock.now_ms += 5 * MINUTE_MS
        reconcile(runner, export.id, retry_delays_s=())
        location = world.store.get_export(export.id).location
        before = {p.number: p.md5 for p in world.store.window_parts(export.id, DATASET, LATE, location)}
        assert sorted(before) == [0, 1], before  # the window's part and its late part, both in the old table

        # The replace (a key that may overwrite, for it alone), lost part-way.
        def before_file(_export_id: str) -> None:
            files = world.store.table_files(export.id, DATASET, location, from_ms=LATE.from_ms, to_ms=LATE.to_ms)
            removed = all(f.removed for f in files) and not world.store.unlanded_table_versions(
                export.id, DATASET, location
            )
            now = {p.number: p for p in world.store.window_parts(export.id, DATASET, LATE, location)}
            overwritten = now[0].landed and now[0].md5 != before[0]
            if removed and (overwritten if ending == "after its first overwrite" else True):
                raise WorkerLost

        proxy.write_once = False
        runner.before_file = before_file
        world.clock.now_ms += 5 * MINUTE_MS
        with pytest.raises(WorkerLost):
            runner.write_window(export.id, DATASET, LATE, replace=True)
        runner.before_file = None
        proxy.write_once = True
        assert world.store.replace_unfinished(export.id, DATASET, LATE, location)
        ledger = {p.number: p for p in world.store.window_parts(export.id, DATASET, LATE, location)}
        if ending == "after its first overwrite":
            late_ids = {r[1] for r in late}
            assert late_ids <= set(unpack_ids(ledger[0].ids or b"")) and late_ids <= set(
                unpack_ids(ledger[1].ids or b"")
            )
        else:
            assert {n: p.md5 for n, p in ledger.items()} == before
        overwrites = list(proxy.overwrites)
        old = keys_under(s3, bucket, "old/")
        copy_out(old, tmp_path / "old")
        old_table = table_ids(tmp_path / "old" / "old" / DATASET)
        in_window = {r[0] for r in _window_rows(world, LATE)}
        assert not in_window & set(old_table), "the replace's remove left the window in the old table"

        # The move, before any run at `old` finishes the replace; two hours at `new` with their passes.
        config, _ = world.store.destination_config(export.id)
        world.clock.now_ms = DAY0 + 6 * HOUR_MS + 45 * MINUTE_MS
        world.store.update_destination(export.id, dataclasses.replace(config, prefix="new"), world.clock())
        for hour in (7, 8):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + 120_000
            runner.run_day(export.id, DATASET, day)
            reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        assert keys_under(s3, bucket, "old/") == old, "something was written at the old place after the move"
        new = keys_under(s3, bucket, "new/")
        copy_out(new, tmp_path / "new")
        root = tmp_path / "new" / "new" / DATASET
        new_table = table_ids(root)

        # Exactly once as a table: each table holds a row once, and together they hold the source.
        position = world.store.get_export(export.id).dataset_state(DATASET)
        assert position is not None and position.position_ms == DAY0 + 8 * HOUR_MS
        assert len(new_table) == len(set(new_table)) and len(old_table) == len(set(old_table))
        assert in_window <= set(new_table)
        assert sorted(old_table + new_table) == sorted(source_ids(world, position.position_ms))
        carried = [k for k in new if "/_delta_rows/" in k]
        assert carried == [f"new/{DATASET}/_delta_rows/{LATE.date_key}/{carried[0].rsplit('/', 1)[-1]}"], carried
        assert re.fullmatch(
            rf"{DATASET}-{LATE.from_ms}-{LATE.to_ms}-r[0-9a-f]{{12}}-0000\.parquet", carried[0].rsplit("/", 1)[-1]
        )
        assert not [k for k in new if f"/date={LATE.date_key}/{DATASET}-{LATE.from_ms}-" in k], (
            "a file loader would see them"
        )

        # DuckDB's delta extension reads the same table straight from the S3 server.
        secret = (
            "CREATE SECRET moto (TYPE s3, KEY_ID 'testing', SECRET 'testing', REGION 'us-east-1', "
            f"ENDPOINT '127.0.0.1:{moto.port}', URL_STYLE 'path', USE_SSL false)"
        )
        s3_root = f"s3://{bucket}/new/{DATASET}"
        out = duckdb_httpfs.run(
            ["SET enable_progress_bar = false", secret],
            [
                f"SELECT count(*), count(DISTINCT id) FROM delta_scan('{s3_root}')",
                f"SELECT count(*) FROM delta_scan('{s3_root}') WHERE id LIKE 'eev_replaced_%' AND date = '{LATE.date_key}'",
            ],
            extensions=("httpfs", "delta"),
        )
        assert out["results"][0][0] == [str(len(new_table))] * 2
        assert out["results"][1][0] == [str(len(late))]

        # `verify` accepts the new place, with the ledger too (files and table).
        checked = verify_bucket(LocalBucket(tmp_path / "new" / "new"), ledger=(world.store, export.id), workers=1)
        assert checked.problems == []
        assert verify_tables(LocalBucket(tmp_path / "new" / "new"), ledger=(world.store, export.id)) == []

        # Idempotent: one more pass writes nothing; the only overwrites were the replace's, at `old`.
        world.clock.now_ms += 10 * MINUTE_MS
        reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        assert keys_under(s3, bucket, "new/") == new
        # A second move carries nothing again: the window is whole in the table at `new`.
        config, _ = world.store.destination_config(export.id)
        world.store.update_destination(export.id, dataclasses.replace(config, prefix="third"), world.clock())
        world.clock.now_ms = DAY0 + 9 * HOUR_MS + 120_000
        runner.run_day(export.id, DATASET, day)
        reconcile(runner, export.id, lateness_ms=HOUR_MS, thin=True, retry_delays_s=())
        third = keys_under(s3, bucket, "third/")
        assert third and not [k for k in third if "/_delta_rows/" in k], sorted(third)
        assert keys_under(s3, bucket, "new/") == new
        assert proxy.overwrites == overwrites and all(k.startswith(f"/{bucket}/old/") for k in overwrites), overwrites
    finally:
        proxy.close()


def _window_rows(world: World, window: Window) -> list[Any]:
    with world.source_engine.connect() as conn:
        return conn.execute(
            sa.text(f"SELECT id FROM {DATASET} WHERE account_id = 'acme' AND recorded_at > :a AND recorded_at <= :b"),
            {"a": iso_ms(window.from_ms), "b": iso_ms(window.to_ms)},
        ).all()
