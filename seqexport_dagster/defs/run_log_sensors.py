"""Sensors that keep `seqexport history` (the control plane's run log) in step with Dagster.

A run that Dagster ends without our code closing it (canceled while queued, its worker lost) leaves
open run-log entries; these sensors close them with the run's end state (`settle_run`).
"""

from __future__ import annotations

from typing import Any, Final

import dagster as dg

from seqexport_dagster.defs.assets import OP_NAME
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.defs.sensors import run_exports
from seqexport_dagster.delivery.day_run import run_trigger
from seqexport_dagster.errors import ExportError
from seqexport_dagster.store import run_log
from seqexport_dagster.store.run_log import RunLog

#: Why the run log says what it says when Dagster, not the run, ended the run.
ENDED_BY_DAGSTER: Final = {
    run_log.CANCELED: "the run was canceled in Dagster before it finished",
    run_log.FAILED: "the run ended in Dagster before it finished (run worker lost); the scheduler retries it",
}


def settle_run(control_plane: ControlPlaneResource, run: dg.DagsterRun, status: str, now_ms: int) -> int:
    """Make the run log agree with Dagster about a run that ended without our code closing it.

    The run names its exports in its config and its day in its partition tag; a run launched for
    "every active export" (empty list) that never started cannot say which exports it would have
    written, and is left out.
    """
    run_config: dict[str, Any] = dict(run.run_config or {})
    config = run_config.get("ops", {}).get(OP_NAME, {}).get("config", {})
    export_ids = run_exports(run)
    day = run.tags.get("dagster/partition")
    datasets = {key.path[-1] for key in run.asset_selection or []}
    if not export_ids or not day:
        return 0
    store = control_plane.store()
    work = []
    for export_id in export_ids:
        try:
            export = store.get_export(export_id)
        except ExportError:
            continue
        work += [(export_id, s.dataset) for s in export.datasets if not datasets or s.dataset in datasets]
    trigger = run_trigger(run.tags, config.get("export_now") or [])
    return RunLog(control_plane.engine()).settle(
        run.run_id, work, day, trigger(work[0][0]) if work else "", status, now_ms,
        ENDED_BY_DAGSTER[status],
    )  # fmt: skip


def run_log_sensor(dagster_status: dg.DagsterRunStatus, status: str, name: str, what: str) -> dg.SensorDefinition:
    """A sensor that settles the run log (`settle_run`) of every run Dagster ends in ``dagster_status``."""

    @dg.run_status_sensor(
        run_status=dagster_status,
        name=name,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Keeps `seqexport history` in step with Dagster: {what}.",
    )
    def settle(context: dg.RunStatusSensorContext, control_plane: ControlPlaneResource, clock: ClockResource) -> None:
        settle_run(control_plane, context.dagster_run, status, clock.now_ms())

    return settle


run_log_canceled_sensor = run_log_sensor(
    dg.DagsterRunStatus.CANCELED, run_log.CANCELED, "run_log_canceled_sensor", "runs canceled before or while writing"
)
run_log_failed_sensor = run_log_sensor(
    dg.DagsterRunStatus.FAILURE, run_log.FAILED, "run_log_failed_sensor", "runs whose worker was lost"
)
