"""`make dev` stops cleanly on Ctrl-C and on SIGTERM (issue 25, item 4).

The real `make dev` runs, in its own process group (`support.processes`), on a demo built into a
temporary folder and a free port; the shared virtualenv is used as it is (``-o`` keeps make from
reinstalling it). Once the UI answers, the test records every process under make (the wrapper,
`dg dev`, the webserver, the daemon, their code servers), sends the signal a terminal sends on
Ctrl-C (SIGINT to the foreground group) or the one a supervisor sends (SIGTERM), and asserts that
every one of them is gone within a bound well under the 35 s that `dg dev`'s children outlived it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import ROOT, group_process

#: The Makefile's DEV_GRACE: time for `dg dev` to shut down by itself before SIGKILL.
ARTEFACTS = ROOT / "test-artefacts"
GRACE_S = 20
#: The grace period, then SIGKILL, then the kernel: everything must be gone by then (the issue saw
#: `dg dev`'s children outlive SIGTERM by more than 35 s).
BOUND_S = GRACE_S + 10
#: What the command lines under make name once `dg dev` is fully up (the code server: grpc).
FULL_TREE = ("run_in_group.py", "webserver", "daemon", "grpc")


def tree(root: int) -> dict[int, str]:
    """Live descendants of ``root`` with their command lines, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid in [p for p, pp in parents.items() if pp == parent]:
            with contextlib.suppress(OSError):
                found[pid] = (Path(f"/proc/{pid}") / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # 127.0.0.1 only
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built by the first `make dev` (its first step), reused by the second."""
    return tmp_path_factory.mktemp("make_dev") / "demo"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "whole_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c to the terminal's group", "sigterm to make alone"],
)
def test_make_dev_stops_with_everything_it_started(
    demo_home: Path, tmp_path: Path, signum: int, whole_group: bool
) -> None:
    venv = Path(sys.executable).parent.parent
    port = free_port()
    command = [
        "make", "-o", f"{venv}/.installed", "dev",
        f"VENV={venv}", f"DEMO={demo_home}", f"DEV_PORT={port}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
    env = {k: v for k, v in env.items() if "proxy" not in k.lower()} | {"PYTHONPATH": str(ROOT)}
    log = tmp_path / "make_dev.log"
    started: dict[int, str] = {}
    try:
        with group_process(command, env=env, log=log, grace_s=5) as make:
            deadline = time.monotonic() + 300
            while not answers(f"http://127.0.0.1:{port}/server_info"):
                assert make.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the UI did not answer:\n" + log.read_text()[-3000:]
                time.sleep(0.25)
            # The daemon starts its code server a little after the UI answers: wait for the full
            # tree, then until it has not changed for a second (a code server per process).
            settled, since = {}, time.monotonic()
            while time.monotonic() < deadline:
                started = tree(make.pid)
                commands = "\n".join(c[:200] for c in started.values())
                if set(started) != set(settled):
                    settled, since = started, time.monotonic()
                elif all(word in commands for word in FULL_TREE) and time.monotonic() - since >= 1.0:
                    break
                time.sleep(0.2)
            assert "run_in_group.py" in commands and "webserver" in commands, commands
            assert "daemon" in commands and "grpc" in commands, commands  # and the code server

            signalled = time.monotonic()
            if whole_group:
                os.killpg(make.pid, signum)  # Ctrl-C: the terminal signals its foreground group
            else:
                os.kill(make.pid, signum)  # a supervisor (or `kill PID`) stopping make only
            while any(alive(pid) for pid in started) and time.monotonic() - signalled < BOUND_S + 30:
                time.sleep(0.2)
            elapsed = time.monotonic() - signalled
            left = {pid: cmd for pid, cmd in started.items() if alive(pid)}
            assert not left, f"still running {elapsed:.1f} s after {signum!r}: {left}"
            assert elapsed < BOUND_S, f"everything stopped, but only after {elapsed:.1f} s"
            ARTEFACTS.mkdir(exist_ok=True)
            with (ARTEFACTS / "make_dev_stop.txt").open("a") as note:
                note.write(f"{signal.Signals(signum).name} ({'group' if whole_group else 'make'}): "
                           f"{len(started)} processes gone in {elapsed:.1f} s\n")  # fmt: skip
            make.wait(timeout=10)
            assert not answers(f"http://127.0.0.1:{port}/server_info")
    finally:
        for pid in started:  # only what this test started, by pid
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


STUBBORN = """
( trap '' TERM INT; setsid sleep 300 & sleep 300 ) &
trap 'exit 0' TERM INT
sleep 300 & wait
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_wrapper_stops_children_that_ignore_the_signal_or_left_the_group(tmp_path: Path, signum: int) -> None:
    """deploy/run_in_group.py alone, fast: a child that ignores SIGTERM and SIGINT, and one that left
    the process group with setsid, are both gone once the grace period is over."""
    script = tmp_path / "stubborn.sh"
    script.write_text(STUBBORN)
    wrapper = [sys.executable, str(ROOT / "deploy" / "run_in_group.py"), "--grace", "2", "--", "bash", str(script)]
    with group_process(wrapper, grace_s=5) as run:
        deadline = time.monotonic() + 30
        while len(tree(run.pid)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        started = tree(run.pid)
        assert len(started) >= 5, started  # bash, its subshell, three sleeps (one in its own session)
        signalled = time.monotonic()
        os.kill(run.pid, signum)
        code = run.wait(timeout=15)
        elapsed = time.monotonic() - signalled
    assert code == 128 + signum and not [pid for pid in started if alive(pid)]
    assert 2 <= elapsed < 6, elapsed  # the grace period, then SIGKILL
