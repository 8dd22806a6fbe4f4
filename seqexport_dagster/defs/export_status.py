"""``export_status``: one partition per export, red while the export fails (issue 25).

Why a run, and not a sensor event, for red: Dagster 1.13 open source marks an asset partition
"Failed" (red in the Catalog's status column, on the asset's Partitions tab and in its counters)
only when a run that targeted the partition failed. A sensor can record materializations,
observations and check evaluations without a run, but no failure, and the asset-health view that
would read check results is not in open source (`dagster_asset_health_queries_supported` is False).
So, on a change of health only, the scheduler sensor launches a small run of `STATUS_JOB` for that
one export's partition:
- failing: the run records the status as an observation (the partition page shows it over the
  partition's last materialization), then fails with `errors.ExportFailed`, its message the
  export's last error, account, failure count and next retry (no stack trace, on the step nor on
  the run: `defs.run_failure`); the partition turns red and its page says why;
- healthy again (or paused, deleted): the run materializes the partition with the status metadata:
  green.
Each partition, ``<account>/<export id>``, is recorded with a materialization of its status the
tick after it is registered (`health.first_status`), so a healthy export is green from the start,
never "Missing". Between changes the sensor records the status as observations, at a bounded rate
(`defs.sensors.status_events`). Runs are few: one per change of health, at most
`MAX_STATUS_RUNS_PER_TICK` a tick.
"""

from __future__ import annotations

from typing import Any, Final

import dagster as dg

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.defs.health import (
    STATUS_ASSET,
    STATUS_CHECK,
    status_check_evaluation,
    status_event,
    status_metadata,
)
from seqexport_dagster.defs.partitions import export_id_of, exports_partitions
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.defs.run_failure import shown_without_stack
from seqexport_dagster.errors import ExportFailed
from seqexport_dagster.management.health import FAILING, export_health

STATUS_JOB: Final = "export_status_job"
GROUP: Final = "exports"
MAX_STATUS_RUNS_PER_TICK: Final = 20


def record_status(context: dg.AssetExecutionContext, control_plane: ControlPlaneResource, clock: ClockResource) -> Any:
    export = control_plane.store().get_export(export_id_of(context.partition_key))
    now = clock.now_ms()
    health = export_health(export, now)
    if health.health == FAILING:
        # Before the failure: the partition page overlays its last materialization with this.
        context.log_event(status_event(export, now))
        retry = f"retries at {iso_ms(health.next_retry_at)}" if health.next_retry_at is not None else "retries soon"
        raise shown_without_stack(
            ExportFailed(
                f"{health.last_error_dataset}: {health.last_error}\n"
                f"Export {export.id} (account {export.account_id}) is failing: {health.failures} failure(s); {retry}."
            )
        )
    return dg.MaterializeResult(metadata=status_metadata(export, now))


def _export_status(context, control_plane, clock):  # type: ignore[no-untyped-def]
    return record_status(context, control_plane, clock)


# Dagster reads parameter annotations as objects; postponed annotations would be strings here.
_export_status.__annotations__.update(
    context=dg.AssetExecutionContext, control_plane=ControlPlaneResource, clock=ClockResource
)
status_asset = dg.asset(
    name=STATUS_ASSET,
    partitions_def=exports_partitions,
    group_name=GROUP,
    description=(
        "One partition per export: red while it fails (its run says why), green once it recovers; "
        "observations: account, status, health, position, behind, failures, next retry, last error."
    ),
)(_export_status)


def _no_failing_exports(control_plane):  # type: ignore[no-untyped-def]
    evaluation = status_check_evaluation(control_plane.store().list_exports(), DATASETS)
    return dg.AssetCheckResult(
        passed=evaluation.passed,
        metadata=dict(evaluation.metadata),
        description=evaluation.description,
        severity=evaluation.severity,
    )


_no_failing_exports.__annotations__.update(control_plane=ControlPlaneResource)
#: Evaluated by the sensor when the set of failing exports changes; a UI launch may run it too.
status_check = dg.asset_check(
    asset=STATUS_ASSET,
    name=STATUS_CHECK,
    description="Fails while any active export fails; names each failing export with its account and error.",
)(_no_failing_exports)

status_job = dg.define_asset_job(
    STATUS_JOB,
    selection=dg.AssetSelection.assets(status_asset).without_checks(),
    executor_def=dg.in_process_executor,
    description="Records one export's change of health on export_status: fails while it fails.",
)
