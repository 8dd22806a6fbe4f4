"""The periodic refresh of ``export_status``, recorded in runs so that it ages out with them (issue 23).

The sensor records an export's status on every change of health. Those are runless events: a
sensor cannot log into a run. Between changes the status is refreshed every 6 hours, so the page
of a healthy export shows how far behind it is now. Dagster's public API deletes events only with
their run (`DagsterInstance.delete_run`). Refreshes recorded by the sensor would therefore stay
for ever: 12,000 a day at 3,000 exports, about 5.5 GB a year. A small run records them instead.
The sensor requests one an hour (`REFRESH_EVERY_TICKS`), and each run covers one of `SLOTS` slices
of the exports (`slot_of`). The maintenance job's run retention (`defs.maintenance`, 30 days)
deletes them together with their run.
"""

from __future__ import annotations

import zlib
from typing import Final

import dagster as dg

from seqexport_dagster.defs.health import status_event
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.store import DELETED
from seqexport_dagster.store.fleet import fleet_exports

REFRESH_JOB: Final = "export_status_refresh_job"
#: Every export is refreshed once per `SLOTS` refresh runs: 6 slices, a run an hour, 6 hours each.
SLOTS: Final = 6
#: Sensor ticks between two refresh runs (an hour at 30 s a tick).
REFRESH_EVERY_TICKS: Final = 120
#: On a refresh run: its slice, for the Runs page's filter.
SLOT_TAG: Final = "seqexport/status-slot"


def slot_of(export_id: str, slots: int = SLOTS) -> int:
    """The slice an export's refresh falls in, stable for the export's lifetime."""
    return zlib.crc32(export_id.encode()) % slots


def refresh_due(tick: int) -> int | None:
    """The slot the sensor's tick ``tick`` refreshes, or None (one tick in `REFRESH_EVERY_TICKS`).

    Not the first tick: a new deployment's first tick records every export as new anyway."""
    if tick % REFRESH_EVERY_TICKS != REFRESH_EVERY_TICKS - 1:
        return None
    return (tick // REFRESH_EVERY_TICKS) % SLOTS


class RefreshConfig(dg.Config):
    slot: int
    slots: int = SLOTS


def _refresh(
    context: dg.OpExecutionContext, config: RefreshConfig, control_plane: ControlPlaneResource, clock: ClockResource
) -> dg.Output[None]:
    if not 0 <= config.slot < config.slots:
        raise dg.Failure(f"slot must be between 0 and {config.slots - 1} (slots: {config.slots}); got {config.slot}")
    now = clock.now_ms()
    chosen = [
        e for e in fleet_exports(control_plane.engine())
        if e.status != DELETED and slot_of(e.id, config.slots) == config.slot
    ]  # fmt: skip
    for export in chosen:
        context.log_event(status_event(export, now))
    context.log.info(f"export_status refreshed for {len(chosen)} export(s): slice {config.slot} of {config.slots}")
    return dg.Output(None, metadata={"exports": len(chosen), "slot": config.slot})


# Dagster reads the parameters' types at definition time; with postponed annotations they are strings.
_refresh.__annotations__.update(
    context=dg.OpExecutionContext,
    config=RefreshConfig,
    control_plane=ControlPlaneResource,
    clock=ClockResource,
    **{"return": dg.Output[None]},
)
refresh_op = dg.op(
    name="refresh_export_status",
    description="Records the status of a slice of the exports on export_status (every 6 hours each).",
)(_refresh)


@dg.job(name=REFRESH_JOB, executor_def=dg.in_process_executor, description=__doc__.splitlines()[0])
def refresh_job() -> None:
    refresh_op()
