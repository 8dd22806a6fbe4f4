"""A Parquet day written as a run worker writes it, in a process of its own, and what it loaded.

``python -m seqexport_dagster_tests.support.worker_imports OUT CONTROL_URL SOURCE_URL KEY_SPEC EXPORT_ID
NOW_MS [DATASET]`` opens the control plane and the source from their URLs (`assembly`), runs
`Runner.run_day` for the export's DATASET (``email_events`` unless given) on the day of ``NOW_MS``,
prints the rows written and writes the names in `sys.modules` as it exits to OUT, one a line. This module imports nothing of the package before the worker path does.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    listing, control_url, source_url, key_spec, export_id, now = argv[:6]
    dataset = argv[6] if len(argv) > 6 else "email_events"
    from seqexport_dagster.contract.window import day_of
    from seqexport_dagster.delivery.assembly import control_plane_at, source_at
    from seqexport_dagster.delivery.runner import Runner
    from seqexport_dagster.destination.policy import OperatorPolicy

    try:
        now_ms = int(now)
        runner = Runner(
            control_plane_at(control_url, key_spec),
            source_at(source_url),
            OperatorPolicy(allow_local=True),
            clock=lambda: now_ms,
        )
        report = runner.run_day(export_id, dataset, day_of(now_ms))
        sys.stdout.write(f"{sum(w.rows for w in report.windows)}\n")
        return 0
    finally:
        Path(listing).write_text("\n".join(sorted(sys.modules)) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
