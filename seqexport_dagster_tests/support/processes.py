"""Starting and stopping the servers and workers tests start (dagster-daemon, dagster dev, workers).

Each one runs in its own process group (``start_new_session=True``), so its children (code server,
run workers) are stopped with it: first SIGTERM to the group, then SIGKILL after a grace period. A
leftover child holding the output pipe would otherwise hang CI until its time limit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The repository (this file is seqexport_dagster_tests/support/processes.py).
ROOT = Path(__file__).resolve().parents[2]


def start_group(
    command: Sequence[str],
    *,
    log: Path | None = None,
    cwd: Path | None = ROOT,
    env: Mapping[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """``command`` in its own process group. With ``log``, its stdout and stderr are appended to that
    file; otherwise ``popen`` (``stdout=``, ``stderr=``, ``text=``...) goes to `subprocess.Popen`.
    It starts with the default answer to SIGINT, SIGTERM and SIGHUP (`_default_signals`)."""
    with _default_signals():
        if log is None:
            return subprocess.Popen(list(command), cwd=cwd, env=env, start_new_session=True, **popen)
        with log.open("ab") as out:
            return subprocess.Popen(
                list(command), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen
            )


@contextmanager
def _default_signals() -> Iterator[None]:
    """A signal this process ignores is ignored by what it starts (an ignored disposition survives
    exec). pytest run as a shell's background job ignores SIGINT, and Dagster, once run in-process,
    maps SIGTERM to SIGINT's disposition (`dagster._utils.interrupts`): every `make dev` started
    after then ignored the SIGTERM its test sends. Ignored ones are set to the default around the
    start, which exec then keeps."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may change dispositions
        return
    ignored = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) == signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, signal.SIG_DFL)
    try:
        yield
    finally:
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)


@contextmanager
def group_process(command: Sequence[str], *, grace_s: float = 15.0, **start: Any) -> Iterator[subprocess.Popen[Any]]:
    """`start_group`, stopped with `stop_group` however the block ends."""
    process = start_group(command, **start)
    try:
        yield process
    finally:
        stop_group(process, grace_s)


def run_in_group(
    command: Sequence[str], *, timeout: float, grace_s: float = 2.0, **start: Any
) -> subprocess.CompletedProcess[str]:
    """A worker run to its end in its own process group, its output captured as text. One still
    running after ``timeout`` is stopped with its whole group before `TimeoutExpired` is raised
    (`subprocess.run` would kill the worker alone and leave its children)."""
    with group_process(
        command, grace_s=grace_s, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **start
    ) as process:
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)


def kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL of the whole group at once: a crash, not a shutdown. A group already gone raises
    `ProcessLookupError`, since a test that kills a process expects it to be alive."""
    os.killpg(process.pid, signal.SIGKILL)


def group_gone(pgid: int) -> bool:
    """True once no process of the group ``pgid`` is left (zombies reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def stop_group(process: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM to the group, then SIGKILL to whatever is left of it: after the grace period, or at
    once when the leader is gone but a child (one that ignores SIGTERM, or outlived its parent) is not."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    if not group_gone(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


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
    return start_group(
        [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
        log=log,
        env=env,
    )
