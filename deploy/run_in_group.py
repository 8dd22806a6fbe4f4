"""Run a command so that Ctrl-C or SIGTERM stops it and every process it started (`make dev`).

``python deploy/run_in_group.py [--grace SECONDS] -- COMMAND...``

`dg dev` starts the webserver and the daemon, which start code servers and run workers. Stopped with
SIGTERM, `dg dev` used to leave its children running for more than 35 s (issue 25). This wrapper:

1. starts COMMAND in a new session, so it and everything it starts share one process group that no
   terminal signals by itself, and makes itself a child subreaper (Linux), so a descendant whose
   parent died is re-parented here instead of escaping to init;
2. forwards SIGINT (Ctrl-C), SIGTERM and SIGHUP to that group, and to every other live descendant;
   its parent dying counts as SIGTERM (``make dev`` run by a supervisor that stops make only);
3. after ``--grace`` seconds (default 10) SIGKILLs whatever of them is left, and exits only when none
   is left: with COMMAND's exit code, or 128 + the signal that stopped it.

Standard library only: it runs before anything is imported from the package.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process, and this process gets SIGTERM when its
    parent (make) dies, however it dies, even by SIGKILL (Linux only; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def processes() -> dict[int, tuple[int, str]]:
    """``pid: (parent pid, state)`` of every process, from /proc (empty where there is no /proc)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``."""
    table = processes()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent]
        found += [pid for pid in children if table[pid][1] != "Z"]
        frontier += children
    return found


def reap(keep: int) -> None:
    """Collect orphans re-parented here that have exited; ``keep`` (the command) is left to Popen,
    which needs its exit status."""
    for pid, (ppid, state) in processes().items():
        if ppid == os.getpid() and pid != keep and state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def signal_all(pgid: int, signum: int) -> None:
    """``signum`` to the command; SIGTERM (or SIGKILL) to everything else under this process. The
    webserver and the daemon shut down on SIGTERM as they do on SIGINT, and a run worker on SIGINT
    would only start a KeyboardInterrupt traceback."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pgid, signum)
    others = signal.SIGKILL if signum == signal.SIGKILL else signal.SIGTERM
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, others)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, others if pid != pgid else signum)


def anything_left(pgid: int) -> bool:
    reap(keep=pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return bool(descendants(os.getpid()))
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_in_group.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between the signal and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")

    become_subreaper()
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    child = subprocess.Popen(command, start_new_session=True)
    pgid = child.pid

    deadline: float | None = None
    sent = 0
    while True:
        code = child.poll()
        if len(received) > sent:
            # Forward each signal as it arrives: a second Ctrl-C is passed on too.
            for signum in received[sent:]:
                signal_all(pgid, signum)
            sent = len(received)
            deadline = deadline or time.monotonic() + args.grace
        if code is not None and deadline is None:
            # The command ended by itself: stop what it leaves behind, with the same grace.
            signal_all(pgid, signal.SIGTERM)
            deadline = time.monotonic() + args.grace
        if deadline is not None and not anything_left(pgid):
            break
        if deadline is not None and time.monotonic() >= deadline:
            signal_all(pgid, signal.SIGKILL)
            time.sleep(0.2)
            if not anything_left(pgid):
                break
        time.sleep(0.1)
    code = child.wait()
    if received:
        sys.stderr.write(f"run_in_group: stopped {' '.join(command[:2])} and everything it started\n")
        return 128 + received[0]
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
