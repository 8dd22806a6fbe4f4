"""`seqexport maintain`: compact old history and prune what has expired, with progress and a summary.

Operators only (the control-plane database, never through the HTTP API). Safe beside running
deliveries, and a second run right after the first removes nothing (`store.maintenance`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from seqexport_dagster.cli.exits import EXIT_OK
from seqexport_dagster.cli.render import Output
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.progress import reporter

if TYPE_CHECKING:
    from seqexport_dagster.cli.commands import AnyExports

_WORDS = (
    ("days_compacted", "days compacted into summaries"),
    ("days_kept", "old days kept whole (still in use)"),
    ("windows_removed", "window attempts removed"),
    ("parts_removed", "parts removed"),
    ("run_log_removed", "run-log entries removed"),
    ("summaries_written", "day summaries written"),
    ("idempotency_keys_removed", "expired Idempotency-Keys removed"),
    ("connection_tests_removed", "old connection tests removed"),
    ("leases_removed", "lapsed writer leases removed"),
    ("webhook_events_removed", "webhook events older than 30 days removed (with their delivery log)"),
)


def maintain(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    from seqexport_dagster.management.api import Exports
    from seqexport_dagster.store.maintenance import maintain as run_maintenance

    if not isinstance(api, Exports):
        raise InvalidInput(
            "SEQEXPORT_API_URL", "seqexport maintain needs the control-plane database; unset SEQEXPORT_API_URL"
        )
    now = api.clock()
    with reporter(out.as_json) as shown:
        shown.line(f"maintenance: compacting days that ended before {iso_ms(now)} minus 14 days")
        report = run_maintenance(api.store.engine, now, progress=shown.advance)
    figures = report.as_dict()
    if out.as_json:
        out.json(figures)
        return EXIT_OK
    out.line(f"Kept whole: everything after {iso_ms(report.cutoff_ms)}.")
    for key, words in _WORDS:
        out.line(f"  {figures[key]:>10}  {words}")
    return EXIT_OK
