"""End to end: the real `dagster-daemon` on a temporary DAGSTER_HOME launches runs into a moto bucket.

Also the secret-leak audit, after one succeeding and one failing run: two planted S3 secrets (one
per export; the failing export's bucket does not exist) and the credential master key must never
reach the instance's storage (run and event databases, run config, tags, failure events, metadata,
compute logs), the daemon's output, the control plane's errors, nor the CLI's output.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster import serialize_value

from seqexport_dagster import cli
from seqexport_dagster.destination.base import DestinationConfig
from seqexport_dagster.runner import wall_clock_ms
from seqexport_dagster.source.generator import Scale, generate_account
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.window import HOUR_MS, MINUTE_MS, chain
from seqexport_dagster_tests.processes import daemon_env, start_daemon, stop_group
from seqexport_dagster_tests.world import World

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("email_events", "sms_events")


@pytest.mark.slow
def test_daemon_sensor_launches_runs_into_moto_and_no_secret_leaks(tmp_path, moto, monkeypatch, capsys):
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    key_spec = new_key_spec("e2e")
    planted = f"PLANTED-{uuid.uuid4().hex}"
    bucket = f"e2e-{uuid.uuid4().hex[:12]}"
    moto.admin_client().create_bucket(Bucket=bucket)

    now = wall_clock_ms()
    created = (now - 50 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    world = World.in_files(tmp_path, created, key_spec)
    generate_account(
        world.source_engine, "acme", now - 2 * HOUR_MS, now, scale=Scale(subscribers=50, email_sends_per_hour=40)
    )
    export = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            bucket,
            prefix="sequenzy",
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIAE2ETESTKEY",
            secret_access_key=planted,
        ),
        datasets=DATASETS,
        frequency="15m",
        lag_ms=MINUTE_MS,
        now_ms=created,
    )
    # A second export whose bucket is gone (deleted by the customer after creation): its run fails.
    planted_failing = f"PLANTED-FAILING-{uuid.uuid4().hex}"
    missing = f"e2e-missing-{uuid.uuid4().hex[:12]}"
    failing = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            missing,
            prefix="sequenzy",
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIAE2EFAILINGKEY",
            secret_access_key=planted_failing,
        ),
        datasets=DATASETS,
        frequency="15m",
        lag_ms=MINUTE_MS,
        now_ms=created,
    )
    env = daemon_env(home, world.control_url, world.source_url, key_spec)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(env, log)
    try:
        instance = dg.DagsterInstance.from_config(str(home))
        deadline = time.monotonic() + 150
        done: list[dg.DagsterRun] = []
        refused: list[dg.DagsterRun] = []
        while time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()[-3000:]
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"export_id": export.id}))
            done = [r for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
            failed = [r for r in runs if r.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)]
            assert not failed, log.read_text()[-3000:]
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"export_id": failing.id}))
            refused = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
            if done and refused:
                break
            time.sleep(1)
        assert done, "no successful run within 150 s:\n" + log.read_text()[-3000:]
        assert refused, "the export without a bucket had no failed run within 150 s:\n" + log.read_text()[-3000:]
    finally:
        stop_group(daemon)

    # Run history: the sensor's run, tagged with the export, on the export × date partition.
    run = done[0]
    assert run.job_name == "export_job"
    assert run.tags["export_id"] == export.id
    assert run.tags["dagster/sensor_name"] == "scheduler_sensor"
    assert run.tags["dagster/partition/export"] == export.id
    assert sorted(instance.get_dynamic_partitions("exports")) == sorted([export.id, failing.id])
    assert instance.fetch_observations(dg.AssetKey("email_events"), limit=10).records

    # The bucket: every row of the committed chain exactly once, under the documented names.
    client = moto.admin_client()
    state = world.store.get_export(export.id)
    for dataset in DATASETS:
        position = state.dataset_state(dataset).position_ms
        assert position >= created + 15 * MINUTE_MS
        listed = client.list_objects_v2(Bucket=bucket, Prefix=f"sequenzy/{dataset}/")["Contents"]
        ids = []
        for obj in listed:
            assert obj["Key"].endswith(".jsonl.gz") and "/date=" in obj["Key"]
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            ids += [json.loads(line)["id"] for line in gzip.decompress(body).splitlines()]
        assert len(ids) == len(set(ids))
        assert len(ids) == sum(world.source.count_window(dataset, "acme", w) for w in chain(created, position))

    # The failed run: a permanent error in the customer's words, on the export × date partition.
    bad = refused[0]
    assert bad.tags["dagster/partition/export"] == failing.id
    failures = [
        e.dagster_event
        for e in instance.all_logs(bad.run_id)
        if e.dagster_event and e.dagster_event.event_type == dg.DagsterEventType.STEP_FAILURE
    ]
    assert failures
    for event in failures:
        error = event.step_failure_data.error
        assert error is not None
        assert f"bucket {missing} does not exist at {moto.endpoint}" in error.message, error.message
    # The control plane shows the same error as the last error and in the ledger; the position stays.
    for dataset in DATASETS:
        state = world.store.get_export(failing.id).dataset_state(dataset)
        assert state.position_ms == created
    shown = [s.last_error for s in world.store.get_export(failing.id).datasets if s.last_error]
    assert shown and all(f"bucket {missing} does not exist" in text for text in shown)
    ledger_errors = [w.error for w in world.store.ledger(failing.id) if w.error]
    assert ledger_errors

    # What the customer sees through the CLI: status, history and list, human and --json.
    cli_env = {k: v for k, v in env.items() if k.startswith("SEQEXPORT_")}
    outputs: list[str] = []
    for argv in (
        ["list"],
        ["status", failing.id],
        ["history", failing.id],
        ["status", export.id],
        ["history", export.id],
    ):
        for extra in ([], ["--json"]):
            capsys.readouterr()
            assert cli.main([*argv, *extra], env=cli_env) == 0, argv
            captured = capsys.readouterr()
            outputs.append(captured.out + captured.err)
    assert any(f"bucket {missing} does not exist" in out for out in outputs[2:4]), outputs[2:4]

    # No secret anywhere: neither planted secret nor the master key, in any file the test produced:
    # the instance (SQLite run/event/schedule databases as bytes, compute logs), the daemon's output,
    # and the control plane's and source's databases with their WAL files (secrets are stored
    # encrypted only).
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert log in files and any(p.name.startswith("control.db") for p in files)
    assert any(p.suffix == ".db" for p in home.rglob("*"))
    secrets = [planted, planted_failing, key_spec, key_spec.split(":", 1)[1]]
    needles = [s.encode() for s in secrets]
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"secret found in {path}"
    # Canaries: the byte scan does see what those files hold (the failure's text in the instance's
    # databases, the key id stored in plain text next to the encrypted secret).
    assert any(missing.encode() in p.read_bytes() for p in home.rglob("*.db"))
    assert any(b"AKIAE2EFAILINGKEY" in p.read_bytes() for p in tmp_path.glob("control.db*"))
    # And not in what Dagster stored about either run, read back through the instance: run config,
    # tags, every event log entry (failure events with their error chains included), asset
    # materializations and observations with their metadata.
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"export_id": [export.id, failing.id]}))
    assert {r.status for r in runs} >= {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}
    stored = [json.dumps([r.run_config, r.tags]) for r in runs]
    stored += [serialize_value(e) for r in runs for e in instance.all_logs(r.run_id)]
    for asset in DATASETS:
        stored += [
            serialize_value(m.event_log_entry)
            for m in instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
        ]
        stored += [
            serialize_value(o.event_log_entry)
            for o in instance.fetch_observations(dg.AssetKey(asset), limit=1000).records
        ]
    # ... the control plane's errors, and the CLI's output.
    texts = {
        "dagster": "\n".join(stored),
        "last_error": json.dumps(shown),
        "ledger": json.dumps(ledger_errors),
        "cli": "\n".join(outputs),
    }
    assert "does not exist" in texts["dagster"]
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"secret found in {where}"
    world.dispose()


def test_demo_runs_through_dagster_and_leaves_a_browsable_instance(tmp_path):
    from seqexport_dagster.demo import run_demo

    started = time.monotonic()
    summary = run_demo(tmp_path / "demo")
    assert time.monotonic() - started < 60
    assert summary.dagster_home == tmp_path / "demo" / "dagster_home"
    assert summary.runs >= 2 and summary.rows > 0 and summary.files > 0
    with dg.DagsterInstance.from_config(str(summary.dagster_home)) as instance:
        runs = instance.get_runs()
        assert len(runs) == summary.runs
        assert all(r.status == dg.DagsterRunStatus.SUCCESS and r.job_name == "export_job" for r in runs)
        assert {r.tags["export_id"] for r in runs} == {e.export_id for e in summary.exports}
        assert sorted(instance.get_dynamic_partitions("exports")) == sorted(e.export_id for e in summary.exports)
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
    from seqexport_dagster.definitions import defs

    loaded = defs()
    assert loaded.resolve_job_def("export_job")
    assert {s.name for s in loaded.sensors} == {"scheduler_sensor"}
    assert loaded.sensors[0].minimum_interval_seconds <= 30
