"""The maintenance schedule (issue 23): the control plane's `maintain`, then Dagster's own old runs.

Once a day, ``maintenance_job``:
1. runs `store.maintenance.maintain` (compaction of history older than 14 days, expired keys,
   connection tests and leases), exactly what `seqexport maintain` does;
2. deletes finished Dagster runs created more than ``run_max_age_days`` ago, with their events,
   through Dagster's public API (`DagsterInstance.get_run_records` with a `RunsFilter` on
   ``created_before``, then `DagsterInstance.delete_run`, which removes the run and its event log
   entries). Queued or running runs are never touched, nor the maintenance run itself.
3. deletes the ``export_status`` refresh runs (`defs.status_refresh`) older than
   ``refresh_max_age_days`` the same way. Each refresh is superseded by the next, 6 hours later;
   30 days of them put 120 observations on every export's partition, and the UI reads them all
   when it shows one export (`AssetPartitionDetailQuery`: 0.74 s of a 2.2 s page at 3,000 exports,
   `benchmarks.ui_pages`). Changes of health are other runs and keep the runs' age.

Sensor ticks are pruned by the instance itself (``retention:`` in deploy/dagster*.yaml).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Final

import dagster as dg

from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.defs.status_refresh import REFRESH_JOB
from seqexport_dagster.store.maintenance import maintain

MAINTENANCE_JOB: Final = "maintenance_job"
#: 03:17 UTC daily: off the hour, when most exports' windows are not closing.
MAINTENANCE_CRON: Final = "17 3 * * *"
DEFAULT_RUN_MAX_AGE_DAYS: Final = 30.0
#: Two days of refreshes (8 an export) and the day until the next pass: 12 at most on a partition.
DEFAULT_REFRESH_MAX_AGE_DAYS: Final = 2.0
FINISHED: Final = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


class MaintenanceConfig(dg.Config):
    #: Finished runs created longer ago than this are deleted with their events (0 or less: keep all).
    run_max_age_days: float = DEFAULT_RUN_MAX_AGE_DAYS
    #: Finished ``export_status`` refresh runs older than this go sooner (0 or less: as other runs).
    refresh_max_age_days: float = DEFAULT_REFRESH_MAX_AGE_DAYS
    #: Runs read per page; a pass goes on until none older is left.
    page_size: int = 500


def delete_old_runs(
    instance: dg.DagsterInstance, max_age_days: float, *, keep: str | None = None, now_s: float | None = None,
    page_size: int = 500, job_name: str | None = None,
) -> int:  # fmt: skip
    """Delete finished runs created before ``now − max_age_days`` (of ``job_name`` only, when
    given), with their events; returns how many."""
    if max_age_days <= 0:
        return 0
    now = time.time() if now_s is None else now_s
    before = dt.datetime.fromtimestamp(now - max_age_days * 86_400, tz=dt.UTC)
    deleted = 0
    while True:
        records = instance.get_run_records(
            filters=dg.RunsFilter(created_before=before, statuses=FINISHED, job_name=job_name),
            limit=page_size,
            ascending=True,
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
    refreshes = delete_old_runs(
        context.instance, config.refresh_max_age_days, page_size=config.page_size, job_name=REFRESH_JOB
    )
    context.log.info(
        f"Dagster: deleted {refreshes} finished {REFRESH_JOB} runs older than {config.refresh_max_age_days} days"
    )
    return dg.Output(
        None,
        metadata={
            **{k: dg.MetadataValue.int(v) for k, v in figures.items()},
            "runs_deleted": runs,
            "refresh_runs_deleted": refreshes,
        },
    )


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
    description=(
        "Compact control-plane history older than 14 days; delete Dagster runs past their age (30 days; "
        "export_status refreshes: 2)."
    ),
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
    description=(
        "Daily: seqexport maintain, then Dagster runs older than run_max_age_days (30) are deleted, "
        "and export_status refresh runs older than refresh_max_age_days (2)."
    ),
)
