"""The maintenance schedule (issue 23): the control plane's `maintain`, then Dagster's own old runs.

Once a day, ``maintenance_job``:
1. runs `store.maintenance.maintain` (compaction of history older than 14 days, expired keys,
   connection tests and leases), exactly what `seqexport maintain` does;
2. deletes finished Dagster runs created more than ``run_max_age_days`` ago, with their events,
   through Dagster's public API (`DagsterInstance.get_run_records` with a `RunsFilter` on
   ``created_before``, then `DagsterInstance.delete_run`, which removes the run and its event log
   entries). Queued or running runs are never touched, nor the maintenance run itself.

Sensor ticks are pruned by the instance itself (``retention:`` in deploy/dagster*.yaml).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Final

import dagster as dg

from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.store.maintenance import maintain

MAINTENANCE_JOB: Final = "maintenance_job"
#: 03:17 UTC daily: off the hour, when most exports' windows are not closing.
MAINTENANCE_CRON: Final = "17 3 * * *"
DEFAULT_RUN_MAX_AGE_DAYS: Final = 30.0
FINISHED: Final = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


class MaintenanceConfig(dg.Config):
    #: Finished runs created longer ago than this are deleted with their events (0 or less: keep all).
    run_max_age_days: float = DEFAULT_RUN_MAX_AGE_DAYS
    #: Runs read per page; a pass goes on until none older is left.
    page_size: int = 500


def delete_old_runs(
    instance: dg.DagsterInstance, max_age_days: float, *, keep: str | None = None, now_s: float | None = None,
    page_size: int = 500,
) -> int:  # fmt: skip
    """Delete finished runs created before ``now − max_age_days``, with their events; returns how many."""
    if max_age_days <= 0:
        return 0
    now = time.time() if now_s is None else now_s
    before = dt.datetime.fromtimestamp(now - max_age_days * 86_400, tz=dt.UTC)
    deleted = 0
    while True:
        records = instance.get_run_records(
            filters=dg.RunsFilter(created_before=before, statuses=FINISHED), limit=page_size, ascending=True
        )
        ids = [r.dagster_run.run_id for r in records if r.dagster_run.run_id != keep]
        for run_id in ids:
            instance.delete_run(run_id)
        deleted += len(ids)
        if len(records) < page_size or not ids:
            return deleted


def _maintenance(
    context: dg.OpExecutionContext, config: MaintenanceConfig, control_plane: ControlPlaneResource, clock: ClockResource
) -> dg.Output[None]:
    store = control_plane.store()
    report = maintain(store.engine, clock.now_ms())
    figures = report.as_dict()
    context.log.info(f"control plane: {figures}")
    runs = delete_old_runs(context.instance, config.run_max_age_days, keep=context.run_id, page_size=config.page_size)
    context.log.info(f"Dagster: deleted {runs} finished runs older than {config.run_max_age_days} days")
    return dg.Output(None, metadata={**{k: dg.MetadataValue.int(v) for k, v in figures.items()}, "runs_deleted": runs})


# Dagster reads the parameters' types at definition time; with postponed annotations they are strings.
_maintenance.__annotations__.update(
    context=dg.OpExecutionContext,
    config=MaintenanceConfig,
    control_plane=ControlPlaneResource,
    clock=ClockResource,
    **{"return": dg.Output[None]},
)
maintenance_op = dg.op(
    name="maintenance_op",
    description="Compact control-plane history older than 14 days; delete Dagster runs past their age.",
)(_maintenance)


@dg.job(name=MAINTENANCE_JOB, executor_def=dg.in_process_executor, description=__doc__.splitlines()[0])
def maintenance_job() -> None:
    maintenance_op()


maintenance_schedule = dg.ScheduleDefinition(
    name="maintenance_schedule",
    job=maintenance_job,
    cron_schedule=MAINTENANCE_CRON,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: seqexport maintain, then Dagster runs older than run_max_age_days (30) are deleted.",
)
