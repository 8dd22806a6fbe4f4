"""The one entry point: `workspace.yaml` loads `defs`.

`defs` is a lazy `@dg.definitions` function, so importing this module reads no environment and
opens no database. Resource fields are bound to `dg.EnvVar` only for the variables that are set;
an unset variable leaves the field empty, and `Settings.from_fields` (the one configuration path,
`seqexport_dagster.delivery.settings`) applies the default when the resource is used (a laptop needs no variables).
"""

from __future__ import annotations

import datetime as dt
import gc
import os
import warnings
from collections.abc import Mapping
from typing import Any, Final

import dagster as dg
import sqlalchemy as sa

from seqexport_dagster.defs.assets import build_deliveries
from seqexport_dagster.defs.export_status import status_asset, status_check, status_job
from seqexport_dagster.defs.maintenance import maintenance_job, maintenance_schedule
from seqexport_dagster.defs.partitions import FALLBACK_FIRST_DAY, days_partitions
from seqexport_dagster.defs.resources import (
    ClockResource,
    ControlPlaneResource,
    ExporterResource,
    OperatorResource,
    SourceResource,
)
from seqexport_dagster.defs.run_log_sensors import run_log_canceled_sensor, run_log_failed_sensor
from seqexport_dagster.defs.sensors import export_job, scheduler_sensor
from seqexport_dagster.defs.status_refresh import refresh_job
from seqexport_dagster.defs.webhooks import webhook_sensor
from seqexport_dagster.delivery.settings import RESOURCE_VARIABLES, Settings
from seqexport_dagster.errors import ExportError
from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.fleet import first_export_day

ENV: Final = RESOURCE_VARIABLES
#: Hours of lateness the reconciliation pass repairs (an int field, so bound only when set).
RECONCILE_ENV: Final = "SEQEXPORT_RECONCILE_LOOKBACK_HOURS"


def _env(field: str, environ: Mapping[str, str]) -> Any:
    name = ENV[field]
    return dg.EnvVar(name) if environ.get(name) else ""


def default_resources(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    control_plane = ControlPlaneResource(
        database_url=_env("database_url", environ), secret_keys=_env("secret_keys", environ)
    )
    source = SourceResource(source_url=_env("source_url", environ))
    operator = OperatorResource(allow_local=_env("allow_local", environ))
    if environ.get(RECONCILE_ENV):
        operator = OperatorResource(
            allow_local=_env("allow_local", environ), reconcile_lookback_hours=dg.EnvVar.int(RECONCILE_ENV)
        )
    clock = ClockResource()
    return {
        "control_plane": control_plane,
        "clock": clock,
        "exporter": ExporterResource(control_plane=control_plane, source=source, operator=operator, clock=clock),
    }


def exporter_resources(
    control_plane: ControlPlaneResource,
    source: SourceResource,
    operator: OperatorResource,
    clock: ClockResource,
) -> dict[str, Any]:
    """The resource set for explicit values (tests, the demo): same keys as `default_resources`."""
    return {
        "control_plane": control_plane,
        "clock": clock,
        "exporter": ExporterResource(control_plane=control_plane, source=source, operator=operator, clock=clock),
    }


def first_day_from_env() -> dt.date:
    """The first export's first day, read when the code location loads (never at import).

    Falls back to `FALLBACK_FIRST_DAY` when the control plane cannot be read: the location still
    loads, with earlier (empty) days shown, and the next reload corrects it.
    """
    try:
        engine = create_engine(Settings.from_env().database_url)
        try:
            first = first_export_day(engine)
        finally:
            engine.dispose()
    except (ExportError, sa.exc.SQLAlchemyError):
        return FALLBACK_FIRST_DAY
    return first or dt.datetime.now(tz=dt.UTC).date()


def build_definitions(
    resources: Mapping[str, Any] | None = None, *, first_day: dt.date | None = None
) -> dg.Definitions:
    quiet_owners_beta_warning()
    days = days_partitions(first_day or first_day_from_env())
    deliveries = build_deliveries(days)
    return dg.Definitions(
        assets=[deliveries, status_asset],
        asset_checks=[status_check],
        jobs=[export_job, status_job, refresh_job, maintenance_job],
        schedules=[maintenance_schedule],
        sensors=[scheduler_sensor, run_log_canceled_sensor, run_log_failed_sensor, webhook_sensor],
        resources=dict(resources) if resources is not None else default_resources(),
        # In-process: the batch runs its exports on its own bounded thread pool.
        executor=dg.in_process_executor,
    )


def quiet_owners_beta_warning() -> None:
    """Silence one Dagster `BetaWarning` that names a parameter we never pass (issue 42: it was in
    every demo and 23 times an hour of `make dev`).

    Resolving a sensor that targets a job (`SensorDefinition.with_updated_jobs`, inside Dagster when
    it loads these definitions) re-creates the sensor with its ``owners`` carried over, and the
    beta check fires although no owner was ever given. It fires after this function returns, so the
    filter is process-wide, but matched on that exact message: every other beta or preview warning
    still shows. Called when the definitions are built, never at import.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"Parameter `owners` of initializer `SensorDefinition.__init__` is currently in beta",
        category=dg.BetaWarning,
    )


def settle_heap() -> None:
    """Take every object alive now out of the cyclic garbage collector's full passes (`gc.freeze`).

    What a code location has loaded (Dagster, these modules, the definitions) lives as long as its
    process, and every full collection walks all of it. The sensor's tick after positions moved
    rebuilds every export's record (`store.fleet`), enough new objects to set off a full collection:
    at 3,000 exports 0.13 of that tick's 0.37 CPU-s was the collector, 0.01 of 0.21 once frozen
    (`benchmarks.daemon_tick`, ``gc_s``). Frozen, the loaded heap is no longer walked; reference
    counting still frees its objects, and a cycle among them that dies later is the only thing
    never collected.
    """
    gc.freeze()


@dg.definitions
def defs() -> dg.Definitions:
    """The code location (the daemon's code server, the webserver's, each run worker): built once
    a process, then its heap settled (`settle_heap`)."""
    loaded = build_definitions()
    settle_heap()
    return loaded
