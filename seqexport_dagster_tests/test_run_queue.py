"""The run queue of the repo's dagster.yaml holds back a second run of an export until the first ends.

A real instance on a temporary DAGSTER_HOME holding the repo's dagster.yaml verbatim (SQLite, the
QueuedRunCoordinator and its tag limits). Four runs of ``export_job`` are queued, in this order,
through the code location of ``workspace.yaml``, as the UI or the sensor daemon submits them:

- C1: a backfill-style run of export C: only ``dagster/partition/export``, no ``export_id`` (what a
  UI launch or a backfill run of the export x date partition carries);
- C2: a scheduled run of C (``export_id`` and ``dagster/partition/export``);
- A1, A2: two scheduled runs of export A.

Then the real ``dagster-daemon run`` dequeues them. Its RUN_STARTING events (written just before
the launcher starts a run) and the run records must show C1 and A1 launched first, and C2 and A2
only after them, each once its export's previous run had ended: C2 is held by
``dagster/partition/export`` alone, since C1 has no ``export_id``. Without the limits the queue
keeps submission order (C1, C2, A1, A2, all four within max_concurrent_runs), and the checks fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from seqexport_dagster.defs.assets import SCHEDULED, TRIGGER_TAG
from seqexport_dagster.defs.partitions import export_days, partition_key
from seqexport_dagster.defs.sensors import EXPORT_JOB, EXPORT_TAG, IN_FLIGHT, PARTITION_EXPORT_TAG
from seqexport_dagster.runner import wall_clock_ms
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.window import MINUTE_MS, day_of
from seqexport_dagster_tests.processes import daemon_env, start_daemon, stop_group
from seqexport_dagster_tests.world import World

ROOT = Path(__file__).resolve().parents[1]
LOCATION = "seqexport"
ASSET = dg.AssetKey("email_events")
DEADLINE_S = 120


def submit(env: dict[str, str], workspace_file: Path, runs: list[tuple[str, str, bool]]) -> list[str]:
    """Queue runs of ``export_job`` (email_events) for (export, day, scheduled?) with the public
    `dagster job launch` command, as an operator would; returns their ids."""
    ids = []
    for export_id, day, scheduled in runs:
        # The partition's own tags: dagster/partition, dagster/partition/date, dagster/partition/export.
        tags = dict(export_days.get_tags_for_partition_key(str(partition_key(export_id, day))))
        if scheduled:
            tags |= {EXPORT_TAG: export_id, TRIGGER_TAG: SCHEDULED}
        run_id = str(uuid.uuid4())
        launched = subprocess.run(
            [str(Path(sys.executable).parent / "dagster"), "job", "launch", "-w", str(workspace_file)]
            + ["-j", EXPORT_JOB, "-o", ASSET.path[-1], "--tags", json.dumps(tags), "--run-id", run_id],
            cwd=ROOT,
            env=env,
            capture_output=True,
            start_new_session=True,
            timeout=180,
        )
        assert launched.returncode == 0, launched.stderr.decode()[-3000:]
        ids.append(run_id)
    return ids


def launched_at(instance: dg.DagsterInstance, run_id: str) -> float:
    """When the queue daemon dequeued the run: its RUN_STARTING event precedes the launch."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_STARTING).records
    assert len(records) == 1, f"run {run_id} launched {len(records)} times"
    return records[0].event_log_entry.timestamp


@pytest.mark.slow
def test_queue_holds_a_second_run_of_an_export_until_the_first_ends(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    # The repo's dagster.yaml reads it (storage base_dir).
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    key_spec = new_key_spec("queue")
    # Created now with a daily frequency: nothing is due, so the daemon's own sensor requests no runs.
    now = wall_clock_ms() // MINUTE_MS * MINUTE_MS
    world = World.in_files(tmp_path, now, key_spec)
    a, c = (world.local_export(acct, datasets=("email_events",), frequency="24h").id for acct in "ac")
    world.dispose()
    today = day_of(now).isoformat()
    env = daemon_env(home, world.control_url, world.source_url, key_spec)

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        instance.add_dynamic_partitions("exports", [a, c])
        c1, c2, a1, a2 = submit(
            env, ROOT / "workspace.yaml", [(c, today, False), (c, today, True), (a, today, True), (a, today, True)]
        )
        assert all(instance.get_run_by_id(i).status == dg.DagsterRunStatus.QUEUED for i in (c1, c2, a1, a2))
        backfill = instance.get_run_by_id(c1)
        assert backfill is not None and EXPORT_TAG not in backfill.tags
        assert backfill.tags[PARTITION_EXPORT_TAG] == c

        log = tmp_path / "daemon.log"
        daemon = start_daemon(env, log)
        ids = [c1, c2, a1, a2]
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                assert daemon.poll() is None, log.read_text()[-3000:]
                status = {r.run_id: r.status for r in instance.get_runs(filters=dg.RunsFilter(run_ids=ids))}
                # Never two runs of one export in flight (queued aside), at any poll.
                for first, second in ((a1, a2), (c1, c2)):
                    flying = [
                        s for s in (status[first], status[second]) if s in IN_FLIGHT and s != dg.DagsterRunStatus.QUEUED
                    ]
                    assert len(flying) <= 1, (status, log.read_text()[-3000:])
                if all(s not in IN_FLIGHT for s in status.values()):
                    break
                time.sleep(0.25)
        finally:
            stop_group(daemon)

        records = {r.dagster_run.run_id: r for r in instance.get_run_records(filters=dg.RunsFilter(run_ids=ids))}
        failed = {
            i: r.dagster_run.status for i, r in records.items() if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS
        }
        assert not failed, (failed, log.read_text()[-3000:])
        start = {i: launched_at(instance, i) for i in ids}
        end = {i: records[i].end_time or 0.0 for i in ids}

    # C1 and A1 first: C2, queued before A1, was skipped while C1 was in flight, and so was A2.
    assert max(start[c1], start[a1]) < min(start[c2], start[a2])
    # And each waited for its export's previous run to end: C2 held by dagster/partition/export
    # alone (C1, the backfill-style run, has no export_id).
    assert start[c2] >= end[c1]
    assert start[a2] >= end[a1]
