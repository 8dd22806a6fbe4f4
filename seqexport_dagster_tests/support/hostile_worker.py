"""A run worker in its own process, to measure what a hostile endpoint costs it.

``python -m seqexport_dagster_tests.support.hostile_worker EXPORT_ID DATASET DAY NOW_MS``; everything else
comes from the operator's environment (``SEQEXPORT_*``, read by `Settings`), as in a real worker.
Prints one JSON line: the error type, seconds spent in the run and the process's peak RSS (VmHWM).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time

from benchmarks.procinfo import peak_rss_mb
from seqexport_dagster.delivery.assembly import open_runner
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.errors import ExportError


def main(argv: list[str]) -> int:
    export_id, dataset, day, now_ms = argv
    settings = Settings.from_env()
    runner = open_runner(settings, clock=lambda: int(now_ms))
    error = None
    started = time.monotonic()
    try:
        runner.run_day(export_id, dataset, dt.date.fromisoformat(day), run_id=f"hostile-{os.getpid()}")
    except ExportError as exc:
        error = type(exc).__name__
    seconds = time.monotonic() - started
    sys.stdout.write(json.dumps({"error": error, "seconds": seconds, "peak_rss_mb": peak_rss_mb()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
