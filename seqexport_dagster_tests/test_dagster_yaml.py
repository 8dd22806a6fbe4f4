"""dagster.yaml and the production variant load into a real instance (storage, coordinator, launcher)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from seqexport_dagster_tests.world import postgres_database

ROOT = Path(__file__).resolve().parents[1]


def per_export_limits(config: dict) -> list[dict]:
    return [
        limit
        for limit in config["run_coordinator"]["config"]["tag_concurrency_limits"]
        if limit["key"] in ("export_id", "dagster/partition/export")
    ]


def test_local_instance_loads_with_sqlite_and_per_export_limit(tmp_path, monkeypatch):
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    with dg.instance_for_test(overrides=config, temp_dir=str(tmp_path)) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert instance.run_retries_enabled
        limits = instance.run_coordinator.get_run_queue_config().tag_concurrency_limits
    by_key = {limit["key"]: limit for limit in limits}
    assert by_key["export_id"] == {"key": "export_id", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    assert by_key["dagster/partition/export"]["limit"] == 1
    # Storage really lives under DAGSTER_HOME (the temp dir here).
    assert any(p.suffix == ".db" for p in tmp_path.rglob("*"))


@pytest.mark.postgres
def test_production_instance_loads_with_postgres_and_ecs(tmp_path, monkeypatch):
    config = yaml.safe_load((ROOT / "deploy" / "dagster.production.yaml").read_text())
    assert per_export_limits(config) == per_export_limits(yaml.safe_load((ROOT / "dagster.yaml").read_text()))
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
            # The storage works: a dynamic partition round-trips through PostgreSQL.
            instance.add_dynamic_partitions("exports", ["exp_a"])
            assert instance.get_dynamic_partitions("exports") == ["exp_a"]
            instance.run_storage.dispose()
            instance.event_log_storage.dispose()
