"""The one scheduler sensor: control plane in, run requests out.

A tick costs a fixed number of queries whatever the number of exports: exports (two queries), the
registered ``exports`` partitions (one) and the in-flight runs (one). The policy itself is the pure
`seqexport_dagster.schedule.due_work`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import dagster as dg
from dagster import SensorEvaluationContext

from seqexport_dagster.defs.assets import SCHEDULED, TRIGGER_TAG
from seqexport_dagster.defs.partitions import EXPORT, exports_partitions, partition_key
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.schedule import WorkItem, due_work
from seqexport_dagster.store.store import ExportRecord

EXPORT_TAG: Final = "export_id"
#: Dagster adds this tag to every run of a multi-partition (UI launches and backfills included).
PARTITION_EXPORT_TAG: Final = f"dagster/partition/{EXPORT}"
IN_FLIGHT: Final = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
EXPORT_JOB: Final = "export_job"
TICK_SECONDS: Final = 30


def busy_exports(instance: dg.DagsterInstance) -> set[str]:
    """Exports with a run queued or running: scheduled, launched from the UI, or a backfill."""
    busy = set()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
        export_id = run.tags.get(EXPORT_TAG) or run.tags.get(PARTITION_EXPORT_TAG)
        if export_id:
            busy.add(export_id)
    return busy


def run_request(item: WorkItem) -> dg.RunRequest:
    """Tags carry the export id and nothing else about the export (never a secret)."""
    return dg.RunRequest(
        run_key=item.run_key,
        partition_key=partition_key(item.export_id, item.day.isoformat()),
        asset_selection=[dg.AssetKey(name) for name in item.datasets],
        tags={EXPORT_TAG: item.export_id, TRIGGER_TAG: SCHEDULED},
    )


def evaluate(instance: dg.DagsterInstance, exports: Iterable[ExportRecord], now_ms: int) -> dg.SensorResult:
    """One tick: register new exports as partitions, then request due work of idle exports."""
    records = list(exports)
    known = set(instance.get_dynamic_partitions(exports_partitions.name or "exports"))
    # History stays browsable: partitions of deleted exports are kept, never removed.
    new = [e.id for e in records if e.id not in known]
    requests = [run_request(item) for item in due_work(records, now_ms, busy=busy_exports(instance))]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[exports_partitions.build_add_request(new)] if new else [],
    )


@dg.sensor(
    name="scheduler_sensor",
    job_name=EXPORT_JOB,
    minimum_interval_seconds=TICK_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers exports as partitions and launches their due windows and snapshots.",
)
def scheduler_sensor(
    context: SensorEvaluationContext, control_plane: ControlPlaneResource, clock: ClockResource
) -> dg.SensorResult:
    return evaluate(context.instance, control_plane.store().list_exports(), clock.now_ms())
