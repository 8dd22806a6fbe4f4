"""The process-group helpers every server and worker of the tests goes through (support/processes)."""

from __future__ import annotations

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
