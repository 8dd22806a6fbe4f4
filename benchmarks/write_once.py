"""Write-once delivery, measured: what a retry re-uploads, and what the part ledger stores.

``python -m benchmarks.write_once [--rows-per-part N]`` builds one hour window of email events with
exactly 10 parts, lets the first attempt fail at its last part, and retries it two ways, side by side
on the same data:

- *before* (the first release): the retry rewrote the window from part 0000 under the same names;
  measured with today's ``replace``, which is exactly that rewrite;
- *after* (write-once): the retry skips the 9 landed parts and sends the last one.

It then prints the part ledger's cost for late-row detection: the deflated ids per part, in bytes
per row and per window, beside the gzip parts themselves.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.local import LocalDestination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import RetryableError
from seqexport_dagster.store.tables import parts
from seqexport_dagster_tests.support.world import DAY0, sqlite_world

WINDOW = Window(DAY0, DAY0 + HOUR_MS)


class Counting:
    """A local folder that counts bytes sent and can fail the n-th write once."""

    preconditions = True

    def __init__(self, root: Path) -> None:
        self.inner = LocalDestination(root)
        self.sent_bytes = 0
        self.sent_parts = 0
        self.fail_at: int | None = None

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        if self.fail_at is not None and self.sent_parts == self.fail_at:
            self.fail_at = None
            raise RetryableError("connection reset (injected at the last part)")
        self.sent_bytes += len(body)
        self.sent_parts += 1
        return self.inner.put(key, body, create_only=create_only)

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        return None


def retry_cost(root: Path, *, replace: bool, sends_per_hour: int) -> tuple[int, int, int, int, int]:
    """(window rows, bytes of the window, bytes and parts the retry sent, ledger id bytes)."""
    root.mkdir(parents=True)
    with sqlite_world(root) as world:
        generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(200, sends_per_hour, 1, 1))
        rows = world.source.count_window("email_events", "acme", WINDOW)
        part_limit = -(-rows // 10)
        export = world.local_export(datasets=("email_events",))
        dest = Counting(world.root / "bucket")
        factory: Callable[[DestinationConfig, OperatorPolicy], Destination] = lambda config, policy: dest  # noqa: E731
        runner = world.runner(part_limit=part_limit, destination_factory=factory)
        world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
        dest.fail_at = 9  # the 10th and last part
        try:
            runner.run_day(export.id, "email_events", WINDOW.day)
        except RetryableError:
            pass
        window_bytes = dest.sent_bytes
        dest.sent_bytes = dest.sent_parts = 0
        if replace:
            report = runner.write_window(export.id, "email_events", WINDOW, replace=True)
        else:
            (report,) = runner.run_day(export.id, "email_events", WINDOW.day).windows
        assert report.parts == 10, report
        with world.control_engine.connect() as conn:
            ids = conn.execute(sa.select(sa.func.sum(sa.func.length(parts.c.ids)))).scalar() or 0
        return rows, window_bytes + dest.sent_bytes, dest.sent_bytes, dest.sent_parts, int(ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends-per-hour", type=int, default=4000, help="email sends in the hour (~2.5 events each)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows, _, before, before_parts, _ = retry_cost(
            Path(tmp) / "before", replace=True, sends_per_hour=args.sends_per_hour
        )
        _, _, after, after_parts, ids = retry_cost(
            Path(tmp) / "after", replace=False, sends_per_hour=args.sends_per_hour
        )
    window_bytes = before  # the replace rewrote every part of the window
    print(f"Write-once retry of a 10-part window ({rows} rows, {window_bytes} bytes gzip), failed at its last part")
    print()
    print("| retry | parts sent | bytes re-uploaded | share of the window |")
    print("|---|---:|---:|---:|")
    print(f"| before (rewrite from 0000) | {before_parts} | {before} | {before / window_bytes:.0%} |")
    print(f"| after (resume) | {after_parts} | {after} | {after / window_bytes:.0%} |")
    print(f"| ratio | | {before / max(after, 1):.1f}x less | |")
    print()
    print("Part ledger for late-row detection (deflated ids, kept while a window is within the lookback):")
    print(f"- {ids} bytes for {rows} rows: {ids / rows:.1f} bytes/row, {ids / 10:.0f} bytes/part, {ids} bytes/window")
    print(f"- {ids / window_bytes:.1%} of the window's own gzip size; plus one ledger row (~200 bytes) per part")
    return 0


if __name__ == "__main__":
    sys.exit(main())
