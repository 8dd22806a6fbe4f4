"""End to end: the real `dagster-daemon` on a temporary DAGSTER_HOME launches batched runs into moto.

Two accounts, seven exports, one failing (its bucket does not exist). Also the secret-leak audit:
two planted S3 secrets and the credential master key must never reach the instance's storage (run
and event databases, run config, tags, events, check evaluations, metadata, compute logs), the
daemon's output, the control plane's errors, nor the CLI's output.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster import serialize_value

from seqexport_dagster import cli
from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, chain, day_of, day_start
from seqexport_dagster.defs.partitions import export_id_of
from seqexport_dagster.delivery import planner
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.processes import daemon_env, start_daemon, stop_group
from seqexport_dagster_tests.support.world import World

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("email_events", "sms_events")


def s3_export(world: World, moto, account: str, bucket: str, prefix: str, key_id: str, secret: str, created: int):
    return world.store.create_export(
        account_id=account,
        destination=DestinationConfig(
            "s3",
            bucket,
            prefix=prefix,
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id=key_id,
            secret_access_key=secret,
        ),
        datasets=DATASETS,
        frequency="15m",
        lag_ms=MINUTE_MS,
        now_ms=created,
    )


def wait_for(what: str, check, log: Path, daemon, seconds: float = 150) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert daemon.poll() is None, log.read_text()[-3000:]
        if check():
            return
        time.sleep(0.25)  # a check is a query: cheap; a second per wait was idle
    raise AssertionError(f"{what} within {seconds:.0f} s:\n" + log.read_text()[-3000:])


def check_records(instance: dg.DagsterInstance, dataset: str) -> list[dg.AssetCheckEvaluation]:
    key = dg.AssetCheckKey(dg.AssetKey(dataset), "exports_healthy")
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=20)
    data = [r.event.dagster_event.event_specific_data for r in records if r.event and r.event.dagster_event]
    # Only evaluations: the sensor's runs do not select the check, so nothing is "planned" by a run.
    assert all(isinstance(d, dg.AssetCheckEvaluation) for d in data), data
    return data


@pytest.mark.slow
def test_daemon_two_accounts_many_exports_one_failing_and_no_secret_leaks(tmp_path, moto, monkeypatch, capsys):
    """The real daemon, two accounts, seven exports in batched runs, one export failing.

    The exports start at 23:30 yesterday, so yesterday's folder is due at once. The UI-facing data
    (check, status asset, run tags) must name the failing export and its error, and yesterday's cells
    must stay open until that export, fixed, completes the day too. No secret reaches any storage.
    """
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    key_spec = new_key_spec("e2e")
    planted = f"PLANTED-{uuid.uuid4().hex}"
    bucket = f"e2e-{uuid.uuid4().hex[:12]}"
    moto.admin_client().create_bucket(Bucket=bucket)

    now = wall_clock_ms()
    created = day_start(now) - 30 * MINUTE_MS
    yesterday = day_of(created).isoformat()
    world = World.in_files(tmp_path, created, key_spec)
    scale = Scale(subscribers=50, email_sends_per_hour=40)
    for account in ("acme", "globex"):
        generate_account(world.source_engine, account, created - HOUR_MS, now + HOUR_MS, scale=scale)
    healthy = [
        s3_export(world, moto, account, bucket, f"{account}-{i}", f"AKIAE2E{i}", planted, created)
        for account, i in (("acme", 0), ("acme", 1), ("acme", 2), ("globex", 3), ("globex", 4), ("globex", 5))
    ]
    # An export whose bucket is gone (deleted by the customer after creation): it fails, alone.
    planted_failing = f"PLANTED-FAILING-{uuid.uuid4().hex}"
    missing = f"e2e-missing-{uuid.uuid4().hex[:12]}"
    failing = s3_export(world, moto, "globex", missing, "sequenzy", "AKIAE2EFAILINGKEY", planted_failing, created)
    env = daemon_env(home, world.control_url, world.source_url, key_spec)
    log = tmp_path / "daemon.log"
    # The instance's storage is created here, before the daemon and its code server start: two
    # processes creating the SQLite schedule storage at once can stamp its Alembic version twice.
    instance = dg.DagsterInstance.from_config(str(home))
    instance.get_runs(limit=1)
    daemon = start_daemon(env, log)
    try:

        def yesterday_done_by_healthy_and_failure_seen() -> bool:
            states = [world.store.get_export(e.id).dataset_state("email_events") for e in healthy]
            bad = world.store.get_export(failing.id).dataset_state("email_events")
            return all(s.position_ms >= day_start(now) for s in states) and bad.failures >= 1

        wait_for(
            "yesterday delivered by the healthy exports and the failure recorded",
            yesterday_done_by_healthy_and_failure_seen,
            log,
            daemon,
        )

        def failing_check_seen() -> bool:
            found = check_records(instance, "email_events")
            return bool(found) and not found[0].passed

        wait_for("a failed exports_healthy check", failing_check_seen, log, daemon, 60)
    except BaseException:
        stop_group(daemon)
        raise

    # Batched runs: yesterday's work of all seven exports went in one run; its tags are bounded (its
    # shards and, two accounts being at most 5, both accounts; seven exports are more than 5, so none
    # by id: the config lists them); the failing export did not fail it.
    shard = f"shard/{planner.shard_of(failing.id)}"
    runs = instance.get_runs(filters=dg.RunsFilter(job_name="export_job", tags={shard: "yes"}))
    assert runs and all(r.tags["dagster/sensor_name"] == "scheduler_sensor" for r in runs)
    first = runs[-1]
    assert first.tags["dagster/partition"] == yesterday and first.tags["seqexport/exports"] == "7"
    assert {f"shard/{planner.shard_of(e.id)}" for e in [*healthy, failing]} <= set(first.tags)
    assert not [k for k in first.tags if k.startswith("export/")]
    assert failing.id in first.run_config["ops"]["deliveries"]["config"]["exports"]
    assert {"account/acme", "account/globex"} <= set(first.tags) and first.tags["seqexport/accounts"] == "2"
    assert instance.get_runs(filters=dg.RunsFilter(tags={"account/acme": "yes"}))
    assert all(r.status != dg.DagsterRunStatus.FAILURE for r in instance.get_runs(dg.RunsFilter(job_name="export_job")))
    logs = "\n".join(e.user_message for e in instance.all_logs(first.run_id))
    assert f"{failing.id} (account globex): bucket {missing} does not exist" in logs

    # The failing export's status run fails its export_status partition (red), saying why.
    def status_failed() -> bool:
        return bool(
            instance.get_runs(
                dg.RunsFilter(job_name="export_status_job", statuses=[dg.DagsterRunStatus.FAILURE]), limit=1
            )
        )

    wait_for("the failing export's status run failing", status_failed, log, daemon, 90)
    (red,) = instance.get_runs(dg.RunsFilter(job_name="export_status_job", statuses=[dg.DagsterRunStatus.FAILURE]))
    assert red.tags["dagster/partition"] == f"globex/{failing.id}" and red.tags["account/globex"] == "yes"

    # The check names the failing export and its error; the status asset gives its details.
    (evaluation, *_) = check_records(instance, "email_events")
    assert not evaluation.passed and evaluation.metadata["failing_exports"].value == 1
    assert failing.id in evaluation.description and f"bucket {missing} does not exist" in evaluation.description
    status = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("export_status"), asset_partitions=[f"globex/{failing.id}"]),
        limit=1,
    ).records[0]
    meta = {k: v.value for k, v in status.asset_observation.metadata.items()}
    assert meta["account"] == "globex" and meta["health"] == "failing" and meta["failures"] >= 1
    assert f"bucket {missing} does not exist" in meta["last_error"] and meta["next_retry"] != "-"
    # Yesterday is not green: one export has not finished it.
    assert not instance.fetch_materializations(dg.AssetKey("email_events"), limit=10).records

    # The customer creates the bucket and presses "export now": the day completes, the cell turns green.
    try:
        moto.admin_client().create_bucket(Bucket=missing)
        world.store.request_export_now(failing.id, wall_clock_ms())

        def green() -> bool:
            return bool(instance.fetch_materializations(dg.AssetKey("email_events"), limit=10).records)

        wait_for("yesterday's email_events cell green", green, log, daemon, 120)
        wait_for("a passing check", lambda: check_records(instance, "email_events")[0].passed, log, daemon, 60)
    finally:
        stop_group(daemon)
    (cell,) = instance.fetch_materializations(dg.AssetKey("email_events"), limit=10).records
    assert cell.asset_materialization.partition == yesterday
    assert cell.asset_materialization.metadata["exports_complete"].value == 7
    assert f"globex/{failing.id}" in instance.get_dynamic_partitions("exports")

    # The bucket: every row of each healthy export's committed chain exactly once.
    client = moto.admin_client()
    for export in healthy[:2]:
        state = world.store.get_export(export.id)
        for dataset in DATASETS:
            position = state.dataset_state(dataset).position_ms
            listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{export.prefix}/{dataset}/")["Contents"]
            ids = []
            for obj in listed:
                assert obj["Key"].endswith(".jsonl.gz") and "/date=" in obj["Key"]
                body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                ids += [json.loads(line)["id"] for line in gzip.decompress(body).splitlines()]
            assert len(ids) == len(set(ids))
            expected = sum(world.source.count_window(dataset, export.account_id, w) for w in chain(created, position))
            assert len(ids) == expected

    shown = [w.error for w in world.store.ledger(failing.id) if w.error]
    assert shown and all(f"bucket {missing} does not exist" in text for text in shown)

    # What the customer sees through the CLI: status, history and list, human and --json.
    cli_env = {k: v for k, v in env.items() if k.startswith("SEQEXPORT_")}
    outputs: list[str] = []
    for argv in (["list"], ["status", failing.id], ["history", failing.id], ["status", healthy[0].id]):
        for extra in ([], ["--json"]):
            capsys.readouterr()
            assert cli.main([*argv, *extra], env=cli_env) == 0, argv
            captured = capsys.readouterr()
            outputs.append(captured.out + captured.err)

    # No secret anywhere: neither planted secret nor the master key, in any file the test produced
    # (instance databases, compute logs, daemon output, control plane with its WAL) ...
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert log in files and any(p.name.startswith("control.db") for p in files)
    secrets = [planted, planted_failing, key_spec, key_spec.split(":", 1)[1]]
    needles = [s.encode() for s in secrets]
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"secret found in {path}"
    # Canaries: the byte scan does see what those files hold.
    assert any(missing.encode() in p.read_bytes() for p in home.rglob("*.db"))
    assert any(b"AKIAE2EFAILINGKEY" in p.read_bytes() for p in tmp_path.glob("control.db*"))
    # ... nor in what Dagster stored, read back: run config, tags, every event (checks, status and
    # day materializations, observations included), nor the control plane's errors or the CLI.
    runs = instance.get_runs()
    stored = [json.dumps([r.run_config, r.tags]) for r in runs]
    stored += [serialize_value(e) for r in runs for e in instance.all_logs(r.run_id)]
    for asset in (*DATASETS, "export_status"):
        stored += [
            serialize_value(m.event_log_entry)
            for m in instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
        ]
        stored += [
            serialize_value(o.event_log_entry)
            for o in instance.fetch_observations(dg.AssetKey(asset), limit=1000).records
        ]
    stored += [repr(e) for e in check_records(instance, "email_events")]
    texts = {"dagster": "\n".join(stored), "ledger": json.dumps(shown), "cli": "\n".join(outputs)}
    assert "does not exist" in texts["dagster"]
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"secret found in {where}"
    instance.dispose()
    world.dispose()


def test_demo_runs_through_dagster_and_leaves_a_browsable_instance(tmp_path):
    from seqexport_dagster.demo.run import run_demo

    started = time.monotonic()
    summary = run_demo(tmp_path / "demo")
    assert time.monotonic() - started < 60
    assert summary.dagster_home == tmp_path / "demo" / "dagster_home"
    assert summary.runs >= 2 and summary.rows > 0 and summary.files > 0
    with dg.DagsterInstance.from_config(str(summary.dagster_home)) as instance:
        # The delivery runs, and the small runs that recorded the completed days (`defs.day_cells`).
        every = instance.get_runs()
        cells = [r for r in every if r.tags.get("seqexport/trigger") == "cells"]
        runs = [r for r in every if r.tags.get("seqexport/trigger") != "cells"]
        assert len(runs) == summary.runs and cells
        assert all(r.status == dg.DagsterRunStatus.SUCCESS and r.job_name == "export_job" for r in every)
        carried = {e for r in runs for e in r.run_config["ops"]["deliveries"]["config"]["exports"]}
        assert carried == {e.export_id for e in summary.exports}
        partitions = instance.get_dynamic_partitions("exports")
        assert sorted(export_id_of(p) for p in partitions) == sorted(e.export_id for e in summary.exports)
        assert all("/" in p for p in partitions), partitions  # named by account (issue 42)
        # Yesterday is complete for every dataset: green cells, including the snapshot.
        for asset in ("email_events", "sms_events", "custom_events", "subscribers"):
            assert instance.fetch_materializations(dg.AssetKey(asset), limit=10).records
        assert instance.fetch_observations(dg.AssetKey("email_events"), limit=10).records
        # The demo's credential key never reaches the instance storage.
        key = (tmp_path / "demo" / "secret.key").read_bytes().strip().split(b":", 1)[-1]
        assert len(key) >= 40
        for path in summary.dagster_home.rglob("*"):
            if path.is_file():
                assert key not in path.read_bytes(), f"demo key found in {path}"


def test_workspace_definitions_load_without_any_environment(monkeypatch):
    for name in ("SEQEXPORT_DATABASE_URL", "SEQEXPORT_SOURCE_URL", "SEQEXPORT_SECRET_KEYS", "SEQEXPORT_ALLOW_LOCAL"):
        monkeypatch.delenv(name, raising=False)
    from seqexport_dagster import definitions
    from seqexport_dagster.definitions import defs

    settled: list[bool] = []
    # Not this test process's heap: `test_the_code_location_settles_its_heap` checks the real one.
    monkeypatch.setattr(definitions, "settle_heap", lambda: settled.append(True))
    loaded = defs()
    assert settled == [True]
    assert loaded.resolve_job_def("export_job")
    # The scheduler, the two run-status sensors that keep `seqexport history` in step with Dagster,
    # and the webhook sender.
    assert {s.name for s in loaded.sensors} == {
        "scheduler_sensor",
        "run_log_canceled_sensor",
        "run_log_failed_sensor",
        "webhook_sensor",
    }
    scheduler = next(s for s in loaded.sensors if s.name == "scheduler_sensor")
    assert scheduler.minimum_interval_seconds <= 30


def test_the_code_location_settles_its_heap():
    """Loading the location freezes what it loaded, so the collector's full passes skip it (issue 29)."""
    code = (
        "import gc, json\n"
        "from seqexport_dagster.definitions import defs\n"
        "before = gc.get_freeze_count()\n"
        "defs()\n"
        "print(json.dumps([before, gc.get_freeze_count(), len(gc.get_objects(generation=2))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    before, after, walked = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == 0
    # Dagster and the definitions: far more objects than the collector still walks after the freeze.
    assert after > 100_000 and walked < after // 10
