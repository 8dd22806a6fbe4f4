"""The process-group helpers every server and worker of the tests goes through (support/processes)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seqexport_dagster_tests.support.processes import group_gone, group_process, run_in_group

#: A worker that starts a child of its own, notes its process group, and then hangs.
HANGING = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(os.getpgid(0)))
time.sleep(120)
"""


def wait_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 10
    while not group_gone(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return group_gone(pgid)


def pgid_from(path: Path) -> int:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


def test_a_worker_past_its_timeout_is_stopped_with_its_children(tmp_path: Path) -> None:
    note = tmp_path / "pgid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_group([sys.executable, "-c", HANGING, str(note)], timeout=3, cwd=tmp_path)
    assert wait_gone(pgid_from(note)), "the worker's child outlived it"


def test_a_finished_worker_returns_its_output() -> None:
    done = run_in_group([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")


def test_a_server_block_stops_the_whole_group_however_it_ends(tmp_path: Path) -> None:
    note = tmp_path / "pgid"
    with pytest.raises(RuntimeError), group_process([sys.executable, "-c", HANGING, str(note)], grace_s=2) as server:
        pgid = pgid_from(note)
        assert pgid == server.pid and not group_gone(pgid)
        raise RuntimeError("the test failed")
    assert wait_gone(pgid)


#: A leader that exits on SIGTERM, leaving a child that ignores it (as processes here may inherit).
DEAF_CHILD = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
time.sleep(0.5)
open(sys.argv[1], "w").write(str(os.getpgid(0)))
time.sleep(120)
"""


def test_a_child_that_ignores_sigterm_is_stopped_with_its_leader(tmp_path: Path) -> None:
    note = tmp_path / "pgid"
    with group_process([sys.executable, "-c", DEAF_CHILD, str(note)], grace_s=5):
        pgid = pgid_from(note)
    assert wait_gone(pgid), "a child that ignores SIGTERM outlived the group's stop"


def test_a_server_starts_with_the_default_answer_to_sigterm_and_sigint() -> None:
    """Run as a shell's background job, pytest ignores SIGINT, and Dagster run in-process then
    maps SIGTERM to that (`dagster._utils.interrupts`); an ignored disposition survives exec, so
    `make dev` started afterwards ignored its test's SIGTERM (CI of 2026-12-03, twice)."""
    probe = (
        "import signal; print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "
        "signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        done = run_in_group([sys.executable, "-c", probe], timeout=30)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, "this process's own disposition is left as it was"
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert done.stdout.split() == ["True", "True"], "SIGTERM at its default, SIGINT raising KeyboardInterrupt"
