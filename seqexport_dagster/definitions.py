"""The one entry point: `workspace.yaml` loads `defs`.

`defs` is a lazy `@dg.definitions` function, so importing this module reads no environment and
opens no database. Resource fields are bound to `dg.EnvVar` only for the variables that are set;
an unset variable leaves the field empty and the resource falls back to `Settings.from_env()`
defaults when it is used (a laptop needs no variables at all).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import dagster as dg

from seqexport_dagster.defs.assets import build_assets
from seqexport_dagster.defs.resources import (
    ClockResource,
    ControlPlaneResource,
    ExporterResource,
    OperatorResource,
    SourceResource,
)
from seqexport_dagster.defs.sensors import EXPORT_JOB, scheduler_sensor

ENV: Final = {
    "database_url": "SEQEXPORT_DATABASE_URL",
    "secret_keys": "SEQEXPORT_SECRET_KEYS",
    "source_url": "SEQEXPORT_SOURCE_URL",
    "allow_local": "SEQEXPORT_ALLOW_LOCAL",
}
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


def build_definitions(resources: Mapping[str, Any] | None = None) -> dg.Definitions:
    assets = build_assets()
    export_job = dg.define_asset_job(
        EXPORT_JOB,
        selection=dg.AssetSelection.assets(*assets),
        executor_def=dg.in_process_executor,
        description="Writes the due windows (or the snapshot) of one export for one UTC day.",
    )
    return dg.Definitions(
        assets=assets,
        jobs=[export_job],
        sensors=[scheduler_sensor],
        resources=dict(resources) if resources is not None else default_resources(),
        # In-process: a pause must cancel the whole run (see assets.py), and one export-day is small.
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
