"""Stopping the servers tests start (dagster-daemon, dagster dev, workers).

Each server runs in its own process group (``start_new_session=True``), so its children (code
server, run workers) are stopped with it: first SIGTERM to the group, then SIGKILL after a grace
period. A leftover child holding the output pipe would otherwise hang CI until its time limit.
"""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass
