"""A real Dagster instance driven like the daemon, on top of a test `World`, with a frozen clock.

`Harness.tick()` evaluates the real scheduler sensor (``build_sensor_context`` with the real
instance) and executes the requested runs in-process on that instance (`demo.ticker.tick`). The
clock is the world's clock, swapped in as a `FixedClock` resource at every tick.
The credential keys reach the resources through `dg.EnvVar`, exactly as in production.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from seqexport_dagster.contract.window import day_of
from seqexport_dagster.definitions import build_definitions, exporter_resources
from seqexport_dagster.defs.resources import (
    ControlPlaneResource,
    ExporterResource,
    FixedClock,
    OperatorResource,
    SourceResource,
)
from seqexport_dagster.demo.ticker import TickOutcome, evaluate_sensor, tick
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.store.fleet import first_export_day
from seqexport_dagster_tests.support.world import DAY0, World

KEYS_ENV = "SEQEXPORT_SECRET_KEYS"


@dataclass
class Harness:
    world: World
    instance: dg.DagsterInstance
    exporter_class: type[ExporterResource] = ExporterResource
    exporter_fields: dict[str, Any] | None = None
    #: The sensor's cursor between ticks, as the daemon keeps it.
    cursor: str | None = None

    def resources(self) -> dict[str, Any]:
        control_plane = ControlPlaneResource(database_url=self.world.control_url, secret_keys=dg.EnvVar(KEYS_ENV))
        source = SourceResource(source_url=self.world.source_url)
        operator = OperatorResource(allow_local="1")
        clock = FixedClock(at_ms=self.world.clock())
        resources = exporter_resources(control_plane, source, operator, clock)
        if self.exporter_class is not ExporterResource or self.exporter_fields:
            resources["exporter"] = self.exporter_class(
                control_plane=control_plane,
                source=source,
                operator=operator,
                clock=clock,
                **(self.exporter_fields or {}),
            )
        return resources

    def first_day(self) -> dt.date:
        return first_export_day(self.world.store.engine) or day_of(self.world.clock())

    def definitions(self) -> dg.Definitions:
        return build_definitions(self.resources(), first_day=self.first_day())

    def tick(self, *, execute: bool = True) -> TickOutcome:
        outcome = tick(self.instance, self.definitions(), execute=execute, cursor=self.cursor)
        self.cursor = outcome.cursor
        return outcome

    def sensor_result(self) -> dg.SensorResult:
        return evaluate_sensor(self.instance, self.resources(), self.cursor)

    def run(
        self,
        export_ids: list[str] | None,
        day: str,
        datasets: list[str],
        tags: dict[str, str] | None = None,
        **config: Any,
    ) -> dg.ExecuteInProcessResult:
        """A run launched by hand (UI "Materialize", launchpad config, or a backfill run): no scheduler tag."""
        job = self.definitions().resolve_job_def("export_job")
        return job.execute_in_process(
            run_config={"ops": {"deliveries": {"config": {"exports": export_ids or [], **config}}}},
            instance=self.instance,
            partition_key=day,
            asset_selection=[dg.AssetKey(d) for d in datasets],
            tags=tags or {},
            raise_on_error=False,
        )

    def materializations(self, asset: str) -> list[dg.EventLogEntry]:
        result = self.instance.fetch_materializations(dg.AssetKey(asset), limit=1000)
        return list(result.records)

    def observations(self, asset: str) -> list[Any]:
        result = self.instance.fetch_observations(dg.AssetKey(asset), limit=1000)
        return list(result.records)


def fast_storage(home: Path) -> dict[str, Any]:
    """One SQLite event log for all runs: a database file per run costs more than our small runs."""
    return {
        "event_log_storage": {
            "module": "dagster.core.storage.event_log",
            "class": "ConsolidatedSqliteEventLogStorage",
            "config": {"base_dir": str(home / "history" / "runs")},
        }
    }


@contextmanager
def harness(root: Path, monkeypatch: pytest.MonkeyPatch, now_ms: int = DAY0) -> Iterator[Harness]:
    spec = new_key_spec("t1")
    monkeypatch.setenv(KEYS_ENV, spec)
    world = World.in_files(root, now_ms, spec)
    home = root / "dagster_home"
    home.mkdir()
    try:
        with dg.instance_for_test(temp_dir=str(home), overrides=fast_storage(home)) as instance:
            yield Harness(world, instance)
    finally:
        world.dispose()
