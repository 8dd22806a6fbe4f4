"""Run-worker CPU per export-window of a scheduled run, with reconciliation, in the steady state.

Issue 29: a scheduled run rechecked a whole day of windows per export and dataset, every run. This
builds that steady state for real (N exports at 15-minute windows, two event datasets, 24 h of
committed history through the real runner into local folders, the part ledger holding every
part's ids), then runs the next scheduled hour (4 due slots) the way a scheduled run's body does:
each export's due windows (`Runner.run_day`), then `reconcile` with the default 24 h lateness.
Each slot reconciles twice, side by side on the same state: the full recheck (before) and the
recheck thinned with age (after, `reconcile.rechecked_now`). The process CPU of each part is
measured separately; the figure is CPU-s per (export, dataset) window, the write included.
Dagster's own per-run overhead is not in it (see the `launch` section for that).

    python -m benchmarks.reconcile_cost [--exports 20] [--postgres]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.reconcile import reconcile
from seqexport_dagster.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of
from seqexport_dagster_tests.support.world import World, postgres_world, sqlite_world

DAY0 = 20726 * DAY_MS
STEP = 15 * MINUTE_MS
LAG = 2 * MINUTE_MS
DATASETS = ("email_events", "custom_events")
LATENESS = 24 * HOUR_MS
SCALE = Scale(subscribers=50, email_sends_per_hour=40, sms_sends_per_hour=0, custom_per_hour=20)


@contextmanager
def world_for(root: Path, postgres: bool) -> Iterator[World]:
    with postgres_world(root, DAY0) if postgres else sqlite_world(root, DAY0) as world:
        yield world


def scheduled_slot(world: World, export_ids: list[str], end_ms: int) -> float:
    """The due windows of the slot ending at ``end_ms``, for every export; returns CPU-s."""
    world.clock.now_ms = end_ms + LAG
    runner = world.runner()
    started = time.process_time()
    for export_id in export_ids:
        for dataset in DATASETS:
            runner.run_day(export_id, dataset, day_of(end_ms - 1))
    return time.process_time() - started


def reconcile_pass(world: World, export_ids: list[str], *, thin: bool) -> tuple[float, int]:
    """One reconciliation pass of every export; returns (CPU-s, windows appended to)."""
    runner = world.runner()
    started = time.process_time()
    changed = 0
    for export_id in export_ids:
        results = reconcile(runner, export_id, lateness_ms=LATENESS, datasets=DATASETS, thin=thin)
        changed += sum(1 for r in results if r.changed)
    return time.process_time() - started, changed


def measure(exports: int, postgres: bool, slots: int = 4) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="seqexport-reconcile-") as tmp, world_for(Path(tmp), postgres) as world:
        ids = []
        for i in range(exports):
            account = f"acct{i:04d}"
            generate_account(world.source_engine, account, DAY0, DAY0 + DAY_MS + 2 * HOUR_MS, scale=SCALE)
            ids.append(world.local_export(account, datasets=DATASETS, frequency="15m", lag_ms=LAG, folder=account).id)
        built = time.monotonic()
        for end in range(DAY0 + STEP, DAY0 + DAY_MS + 1, STEP):  # 24 h of history, slot by slot
            scheduled_slot(world, ids, end)
        history_s = time.monotonic() - built
        write = full = thin = 0.0
        for k in range(1, slots + 1):
            scheduled_slot_cpu = scheduled_slot(world, ids, DAY0 + DAY_MS + k * STEP)
            write += scheduled_slot_cpu
            full_cpu, _ = reconcile_pass(world, ids, thin=False)
            thin_cpu, _ = reconcile_pass(world, ids, thin=True)
            full, thin = full + full_cpu, thin + thin_cpu
        windows = exports * len(DATASETS) * slots
        return {
            "database": "postgresql" if postgres else "sqlite",
            "exports": exports,
            "windows": windows,
            "history_build_s": round(history_s, 1),
            "write_cpu_s_per_window": write / windows,
            "before_cpu_s_per_window": (write + full) / windows,
            "after_cpu_s_per_window": (write + thin) / windows,
            "reconcile_before_cpu_s_per_window": full / windows,
            "reconcile_after_cpu_s_per_window": thin / windows,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=20)
    parser.add_argument("--postgres", action="store_true", help="control plane and source on PostgreSQL")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.exports, args.postgres)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"reconciliation cost, {result['exports']} exports x {len(DATASETS)} datasets at 15 min, 24 h of history, "
          f"{result['database']} ({dt.timedelta(seconds=result['history_build_s'])} to build)")  # fmt: skip
    print(f"  {'':<44} {'before':>10} {'after':>10}")
    for label, before, after in (
        ("CPU-s per export-window (write + reconcile)", "before_cpu_s_per_window", "after_cpu_s_per_window"),
        ("  of which reconciliation", "reconcile_before_cpu_s_per_window", "reconcile_after_cpu_s_per_window"),
    ):
        print(f"  {label:<44} {result[before]:>10.4f} {result[after]:>10.4f}")
    print(
        f"  {'ratio before / after':<44} {result['before_cpu_s_per_window'] / result['after_cpu_s_per_window']:>10.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
