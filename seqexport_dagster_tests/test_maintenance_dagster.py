"""Issue 23, item 2: retention in Dagster with Dagster's own means.

Sensor ticks: the instance's ``retention`` settings in both deploy files, read back by a real
instance. Runs: the maintenance job deletes finished runs older than its configured age with their
events (`DagsterInstance.delete_run`), on a real instance, and leaves recent ones; it runs the
control plane's maintenance in the same pass. The schedule is registered in the definitions.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus

from seqexport_dagster.definitions import build_definitions
from seqexport_dagster.defs.maintenance import (
    MAINTENANCE_JOB,
    delete_old_runs,
    maintenance_job,
)
from seqexport_dagster.defs.resources import ControlPlaneResource, FixedClock
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.world import DAY0, World

ROOT = Path(__file__).resolve().parents[1]
EXPECTED_SENSOR = {TickStatus.SKIPPED: 1, TickStatus.STARTED: 7, TickStatus.SUCCESS: 7, TickStatus.FAILURE: 30}


@pytest.mark.parametrize("name", ["dagster.yaml", "dagster.production.yaml"])
def test_instance_retention_prunes_sensor_ticks(name: str, tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "deploy" / name).read_text())
    retention = {"retention": config["retention"]}  # the storage of the production file needs PostgreSQL
    with dg.instance_for_test(overrides=retention, temp_dir=str(tmp_path)) as instance:
        assert dict(instance.get_tick_retention_settings(InstigatorType.SENSOR)) == EXPECTED_SENSOR
        schedule = instance.get_tick_retention_settings(InstigatorType.SCHEDULE)
        assert set(schedule.values()) == {30}


@dg.op
def noisy(context) -> None:  # type: ignore[no-untyped-def]  # Dagster reads the type, not a string
    context.log.info("an event of this run")


@dg.job
def small_job() -> None:
    noisy()


def test_old_runs_and_their_events_go_recent_ones_stay(tmp_path: Path) -> None:
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        old = [small_job.execute_in_process(instance=instance).run_id for _ in range(3)]
        records = instance.get_run_records(filters=dg.RunsFilter(run_ids=old))
        newest_old = max(r.create_timestamp.timestamp() for r in records)
        time.sleep(1.2)
        recent = small_job.execute_in_process(instance=instance).run_id
        recent_at = instance.get_run_record_by_id(recent).create_timestamp.timestamp()  # type: ignore[union-attr]
        assert all(instance.all_logs(run_id) for run_id in [*old, recent])
        # "now" such that the age cut falls between the old runs and the recent one.
        now = recent_at + 0.5
        age_days = (now - (newest_old + recent_at) / 2) / 86_400
        assert delete_old_runs(instance, age_days, now_s=now, page_size=2) == 3
        assert all(instance.get_run_by_id(run_id) is None for run_id in old)
        assert all(not instance.all_logs(run_id) for run_id in old)
        assert instance.get_run_by_id(recent) is not None and instance.all_logs(recent)
        assert delete_old_runs(instance, age_days, now_s=now) == 0  # idempotent
        assert delete_old_runs(instance, 0, now_s=now + 10**9) == 0  # 0 keeps everything


def test_maintenance_job_compacts_the_control_plane_and_deletes_old_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = new_key_spec("t1")
    monkeypatch.setenv("TEST_MAINT_KEYS", spec)
    world = World.in_files(tmp_path, DAY0, spec)
    try:
        (tmp_path / "dagster").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
            earlier = small_job.execute_in_process(instance=instance).run_id
            resources: dict[str, Any] = {
                "control_plane": ControlPlaneResource(
                    database_url=world.control_url, secret_keys=dg.EnvVar("TEST_MAINT_KEYS")
                ),
                "clock": FixedClock(at_ms=DAY0 + 30 * 86_400_000),
            }
            result = maintenance_job.execute_in_process(
                instance=instance,
                resources=resources,
                run_config={"ops": {"maintenance_op": {"config": {"run_max_age_days": 1e-9}}}},
            )
            assert result.success
            materialized = result.output_for_node("maintenance_op")
            assert materialized is None
            assert instance.get_run_by_id(earlier) is None  # older than a nanosecond-day, and finished
            assert instance.get_run_by_id(result.run_id) is not None  # never itself
            logs = " ".join(e.message for e in instance.all_logs(result.run_id))
            assert "control plane: {" in logs and "deleted 1 finished runs" in logs
    finally:
        world.dispose()


def test_the_schedule_is_registered_and_running_by_default() -> None:
    defs = build_definitions(resources={}, first_day=dt.date(2026, 9, 30))
    schedule = next(s for s in defs.schedules or [] if s.name == "maintenance_schedule")
    assert isinstance(schedule, dg.ScheduleDefinition)
    assert schedule.job_name == MAINTENANCE_JOB
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedule.cron_schedule == "17 3 * * *"
