"""Is a Dagster daemon ticking the scheduler sensor? Asked by `seqexport export-now`.

"Export now" is only a request in the control plane; the scheduler sensor launches the run, and
sensors tick only while a daemon (`dagster-daemon run`, or `dg dev`) runs against the instance
in ``DAGSTER_HOME``. Without one the request waits silently, so the CLI says so.

Dagster is imported only when asked (it takes about a second), never by the export core.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: A daemon beats every 30 s; two minutes without a beat means none is running.
STALE_AFTER_S: Final = 120.0
SENSOR_DAEMON: Final = "SENSOR"


def daemon_warning(env: Mapping[str, str], *, now_s: float | None = None) -> str | None:
    """A one-line warning when no sensor-daemon heartbeat was seen recently, else ``None``."""
    home = env.get("DAGSTER_HOME")
    if not home:
        return (
            "DAGSTER_HOME is not set, so whether a Dagster daemon is running cannot be checked; "
            "the request is carried out by the scheduler sensor, which runs only under "
            "`dagster-daemon run` or `dg dev`"
        )
    if not (Path(home) / "dagster.yaml").is_file() and not (Path(home) / "storage").exists():
        return (
            f"no Dagster instance in DAGSTER_HOME={home}: no daemon has run there, so nothing will "
            "launch the run; start `dagster-daemon run` (or `dg dev`) with that DAGSTER_HOME"
        )
    from dagster import DagsterInstance

    now = time.time() if now_s is None else now_s
    try:
        with DagsterInstance.from_config(home) as instance:
            beat = instance.get_daemon_heartbeats().get(SENSOR_DAEMON)
    except Exception as exc:
        return f"could not read daemon heartbeats from DAGSTER_HOME={home} ({type(exc).__name__})"
    if beat is not None and now - beat.timestamp <= STALE_AFTER_S:
        return None
    seen = "never" if beat is None else f"last seen {int(now - beat.timestamp)} s ago"
    return (
        f"no Dagster daemon heartbeat in DAGSTER_HOME={home} ({seen}): nothing will launch the run until "
        "`dagster-daemon run` (or `dg dev`) is running with that DAGSTER_HOME"
    )
