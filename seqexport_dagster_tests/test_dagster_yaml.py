"""deploy/dagster.yaml and the production variant load into a real instance (storage, coordinator, launcher).

Neither lives in the checkout's root: `dg dev` (and `dagster dev`) warn about a dagster.yaml in the
current folder that is not DAGSTER_HOME, and the instance's settings belong in DAGSTER_HOME anyway.
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest
import yaml

from seqexport_dagster_tests.support.world import postgres_database

ROOT = Path(__file__).resolve().parents[1]


def test_local_instance_loads_with_sqlite_and_no_per_export_tag_limit(tmp_path, monkeypatch):
    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    with dg.instance_for_test(overrides=config, temp_dir=str(tmp_path)) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert instance.run_retries_enabled
        # A run carries a batch of exports: one writer per export is the control plane's lease.
        queue = instance.get_concurrency_config().run_queue_config
        assert not queue.tag_concurrency_limits and queue.max_concurrent_runs == 4
        assert instance.run_coordinator.dequeue_use_threads
        # Sensors tick on threads: a slow webhook tick never delays the scheduler sensor (issue 41).
        assert instance.get_settings("sensors")["use_threads"] is True
    assert "run_coordinator" not in config, "Dagster's concurrency: settings, not the legacy block"
    # Storage really lives under DAGSTER_HOME (the temp dir here).
    assert any(p.suffix == ".db" for p in tmp_path.rglob("*"))


def test_no_instance_file_in_the_checkout_root_and_make_dev_uses_dg() -> None:
    assert not (ROOT / "dagster.yaml").exists() and not (ROOT / "dagster.yml").exists()
    dev = re.search(r"^dev:.*?(?=\n\n|\Z)", (ROOT / "Makefile").read_text(), re.M | re.S)
    assert dev is not None
    assert "$(BIN)/dg dev -w $(CURDIR)/workspace.yaml" in dev[0] and "dagster dev" not in dev[0]


@pytest.mark.postgres
def test_production_instance_loads_with_postgres_and_ecs(tmp_path, monkeypatch):
    config = yaml.safe_load((ROOT / "deploy" / "dagster.production.yaml").read_text())
    assert "run_coordinator" not in config and "tag_concurrency_limits" not in config["concurrency"]["runs"]
    assert config["sensors"]["use_threads"] is True and config["run_queue"]["dequeue_use_threads"] is True
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with postgres_database() as url:
        assert url.startswith("postgresql+psycopg2://")
        monkeypatch.setenv("DAGSTER_PG_URL", url)
        with dg.instance_for_test(overrides=config, temp_dir=str(tmp_path)) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            assert type(instance.run_launcher).__name__ == "EcsRunLauncher"
            assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
            assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 50
            assert instance.run_coordinator.dequeue_use_threads
            # No run lives forever: at least a daily window's worth of work, at most a working day.
            assert instance.run_monitoring_enabled
            assert 2 * 3600 <= instance.run_monitoring_max_runtime_seconds <= 8 * 3600
            # The storage works: a dynamic partition round-trips through PostgreSQL.
            instance.add_dynamic_partitions("exports", ["exp_a"])
            assert instance.get_dynamic_partitions("exports") == ["exp_a"]
            instance.run_storage.dispose()
            instance.event_log_storage.dispose()
