"""A run worker in its own process, so a test can SIGKILL it between two parts.

``python -m seqexport_dagster_tests.support.faults.worker CONTROL_URL SOURCE_URL EXPORT_ID DATASET DAY NOW_MS
PART_LIMIT``; the credential keys come from ``SEQEXPORT_SECRET_KEYS`` (never the command line).
Exit 0 when the run finished; 3 on an export error.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

from seqexport_dagster.delivery.assembly import control_plane_at, source_at
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ExportError
from seqexport_dagster_tests.support.faults.scene import destination_factory


def main(argv: list[str]) -> int:
    control, source, export_id, dataset, day, now_ms, part_limit = argv
    store = control_plane_at(control, os.environ["SEQEXPORT_SECRET_KEYS"])
    runner = Runner(
        store,
        source_at(source),
        OperatorPolicy(allow_local=True),
        clock=lambda: int(now_ms),
        part_limit=int(part_limit),
        destination_factory=destination_factory(),
    )
    try:
        runner.run_day(export_id, dataset, dt.date.fromisoformat(day), run_id=f"worker-{os.getpid()}")
    except ExportError as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
