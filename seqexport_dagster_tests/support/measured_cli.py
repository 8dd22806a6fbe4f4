"""`seqexport` in a subprocess of its own, with its peak memory and time measured.

``python -m seqexport_dagster_tests.support.measured_cli ARGS...`` runs the CLI's `main` with ARGS and,
as it exits, appends one line ``MEASURED {"peak_rss_mb": ..., "seconds": ...}`` to stderr (its own
``VmHWM``: what the CLI process held at most). `run_measured` starts it in its own process group
and returns the exit code, output and figures; a run past its timeout is stopped and fails the test.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MARK = "MEASURED "


@dataclass(frozen=True)
class Measured:
    code: int
    out: str
    err: str  # without the MEASURED line
    peak_rss_mb: float
    seconds: float


def run_measured(argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 300) -> Measured:
    """The CLI with ``argv``, in the environment of the test (no SEQEXPORT_ variables) plus ``env``;
    stdin is empty and not a terminal, as in a script."""
    from seqexport_dagster_tests.support.processes import ROOT, run_in_group

    base = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_")}
    base["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "seqexport_dagster_tests.support.measured_cli", *argv]
    done = run_in_group(command, timeout=timeout, env={**base, **(env or {})}, stdin=subprocess.DEVNULL)
    lines = done.stderr.splitlines()
    figures = json.loads(next(line for line in reversed(lines) if line.startswith(MARK))[len(MARK) :])
    err = "\n".join(line for line in lines if not line.startswith(MARK))
    return Measured(done.returncode, done.stdout, err, figures["peak_rss_mb"], figures["seconds"])


def _peak_kb() -> int:
    """This process's own high-water RSS (``VmHWM``, KiB). Not ``ru_maxrss``: that keeps the peak of
    the process that forked us (pytest, often larger) across the exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str]) -> int:
    started = time.monotonic()
    from seqexport_dagster.cli import main as cli_main

    try:
        code = cli_main(argv)
    finally:
        peak_kb = _peak_kb()
        figures = {"peak_rss_mb": round(peak_kb / 1024, 1), "seconds": round(time.monotonic() - started, 2)}
        print(MARK + json.dumps(figures), file=sys.stderr, flush=True)  # noqa: T201 - run_measured reads it
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
