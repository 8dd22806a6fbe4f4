"""What the sensor daemon and run launcher do, done in this process: for the demo and tests.

`tick` evaluates the real scheduler sensor against a real instance (with the cursor of the last
tick), applies its partition requests and asset events, skips run keys already used (as the daemon
does), and executes each requested run with `execute_in_process` on the same instance (delivery
runs in ``results``, status runs in ``status_results``, the hourly status refreshes in
``refresh_results``, the runs recording completed days in ``cell_results``). Runs,
materializations, observations, check evaluations and partitions land in that instance's storage,
so ``dagster dev`` on the same ``DAGSTER_HOME`` shows them afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from seqexport_dagster.defs.day_cells import CELLS
from seqexport_dagster.defs.export_status import STATUS_JOB
from seqexport_dagster.defs.sensors import EXPORT_JOB, scheduler_sensor
from seqexport_dagster.defs.status_refresh import REFRESH_JOB
from seqexport_dagster.delivery.day_run import TRIGGER_TAG

RUN_KEY_TAG = "dagster/run_key"
SENSOR_TAG = "dagster/sensor_name"


@dataclass
class TickOutcome:
    requested: list[dg.RunRequest] = field(default_factory=list)
    #: The delivery runs (`export_job`), in the order requested.
    results: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    #: The status runs (`export_status_job`: one per export that started or stopped failing; a
    #: failing export's fails on purpose, which turns its ``export_status`` partition red).
    status_results: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    #: The hourly runs refreshing a slice of the exports' status (`defs.status_refresh`).
    refresh_results: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    #: The runs that record completed days (`defs.day_cells`), after the deliveries.
    cell_results: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    asset_events: list[Any] = field(default_factory=list)
    cursor: str | None = None

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.results]


def evaluate_sensor(
    instance: dg.DagsterInstance, resources: Mapping[str, Any], cursor: str | None = None
) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, resources=resources, sensor_name=scheduler_sensor.name, cursor=cursor
    ) as context:
        result = scheduler_sensor(context)
    if not isinstance(result, dg.SensorResult):
        raise TypeError(f"scheduler_sensor returned {type(result).__name__}, expected SensorResult")
    return result


def used_run_keys(instance: dg.DagsterInstance, keys: list[str]) -> set[str]:
    if not keys:
        return set()
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: keys}))
    return {run.tags[RUN_KEY_TAG] for run in runs if RUN_KEY_TAG in run.tags}


def tick(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    *,
    execute: bool = True,
    console_log_level: str | None = None,
    cursor: str | None = None,
) -> TickOutcome:
    """One sensor tick and, with ``execute``, its runs one after another (each a batch of exports)."""
    resources = defs.resources or {}
    result = evaluate_sensor(instance, resources, cursor)
    outcome = TickOutcome(cursor=result.cursor, asset_events=list(result.asset_events or []))
    for event in outcome.asset_events:
        instance.report_runless_asset_event(event)
    for change in result.dynamic_partitions_requests or []:
        if isinstance(change, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(change.partitions_def_name, list(change.partition_keys))
            outcome.registered += list(change.partition_keys)
        elif isinstance(change, dg.DeleteDynamicPartitionsRequest):
            for key in change.partition_keys:
                instance.delete_dynamic_partition(change.partitions_def_name, key)
    used = used_run_keys(instance, [r.run_key for r in result.run_requests or [] if r.run_key])
    outcome.requested = [r for r in result.run_requests or [] if r.run_key not in used]
    if not execute:
        return outcome
    for request in outcome.requested:
        # The sensor's two targets: batched deliveries, and one export's change of health.
        job = defs.resolve_job_def(request.job_name or EXPORT_JOB)
        tags = {**request.tags, SENSOR_TAG: scheduler_sensor.name}
        if request.run_key:
            tags[RUN_KEY_TAG] = request.run_key
        run_config: dict[str, Any] = dict(request.run_config or {})
        if console_log_level:
            # Only the console logger's level: the event log in the instance keeps everything.
            run_config["loggers"] = {"console": {"config": {"log_level": console_log_level}}}
        results = (
            outcome.status_results
            if request.job_name == STATUS_JOB
            else outcome.refresh_results
            if request.job_name == REFRESH_JOB
            else outcome.cell_results
            if request.tags.get(TRIGGER_TAG) == CELLS
            else outcome.results
        )
        results.append(
            job.execute_in_process(
                run_config=run_config,
                instance=instance,
                partition_key=request.partition_key,
                asset_selection=list(request.asset_selection or []) or None,
                tags=tags,
                raise_on_error=False,
            )
        )
    return outcome
