"""Stopping the servers tests start (dagster-daemon, dagster dev, workers).

Each server runs in its own process group (``start_new_session=True``), so its children (code
server, run workers) are stopped with it: first SIGTERM to the group, then SIGKILL after a grace
period. A leftover child holding the output pipe would otherwise hang CI until its time limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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


ROOT = Path(__file__).resolve().parents[2]


def daemon_env(home: Path, control_url: str, source_url: str, key_spec: str) -> dict[str, str]:
    """The environment of a Dagster process serving this repo: no inherited SEQEXPORT_/DAGSTER_
    settings, the test's databases and key, and the operator switch for loopback endpoints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(home),
        "SEQEXPORT_DATABASE_URL": control_url,
        "SEQEXPORT_SOURCE_URL": source_url,
        "SEQEXPORT_SECRET_KEYS": key_spec,
        "SEQEXPORT_ALLOW_LOCAL": "1",
        "PYTHONPATH": str(ROOT),
    }
    return env


def start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`dagster-daemon run` on the repo's workspace, in its own process group, appending to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
