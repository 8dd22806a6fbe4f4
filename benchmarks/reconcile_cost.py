"""Run-worker CPU per export-window of a scheduled run, with reconciliation, in the steady state.

Issue 29: a scheduled run rechecked a whole day of windows per export and dataset, every run. This
builds that steady state (N exports at 15-minute windows, two event datasets, 24 h of committed
history into local folders, the part ledger holding every part's ids), then runs the next scheduled
hour (4 due slots) the way a scheduled run's body does: each export's due windows
(`Runner.run_day`), then `reconcile` with the default 24 h lateness. Each slot reconciles twice,
side by side on the same state: the full recheck (before) and the recheck thinned with age (after,
`reconcile.rechecked_now`). The process CPU of each part is measured separately; the figure is
CPU-s per (export, dataset) window, the write included. Dagster's own per-run overhead is not in it
(see the `launch` section for that).

The history of two exports is written by the real runner, slot by slot; every other export's is
bulk-copied from the first (`benchmarks.reconcile_history`: 1,000 exports through the runner would
take hours). ``copy_differences`` in the result lists where a copy's rows differ from those the
runner wrote for the second export on the same source rows, before and after the hour: it must be
empty.

    python -m benchmarks.reconcile_cost [--exports 20] [--postgres] [--history 96] [--json]
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

from benchmarks import reconcile_history
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale
from seqexport_dagster_tests.support.world import World, postgres_world, sqlite_world

DAY0 = 20726 * DAY_MS
STEP = 15 * MINUTE_MS
LAG = 2 * MINUTE_MS
DATASETS = ("email_events", "custom_events")
LATENESS = 24 * HOUR_MS
SLOTS_PER_DAY = 96
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


def reconcile_pass(
    world: World, export_ids: list[str], *, thin: bool, runner_built: int = 2
) -> tuple[float, int, float]:
    """One reconciliation pass of every export; returns (CPU-s, windows appended to, CPU-s of the
    first ``runner_built`` exports: those whose history the runner wrote, to set beside the copies)."""
    runner = world.runner()
    started = time.process_time()
    changed = 0
    first = 0.0
    for i, export_id in enumerate(export_ids):
        results = reconcile(runner, export_id, lateness_ms=LATENESS, datasets=DATASETS, thin=thin)
        changed += sum(1 for r in results if r.changed)
        if i + 1 == runner_built:
            first = time.process_time() - started
    return time.process_time() - started, changed, first


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def history_slots(slots: int = SLOTS_PER_DAY) -> range:
    """The ends of the history's slots: 24 h (``slots`` quarter-hours) from DAY0."""
    return range(DAY0 + STEP, DAY0 + slots * STEP + 1, STEP)


def build_world(world: World, exports: int, history: int = SLOTS_PER_DAY) -> tuple[list[str], list[str]]:
    """The steady state: two exports' history by the real runner, the others' copied from it."""
    return reconcile_history.build(
        world, exports, datasets=DATASETS, frequency="15m", lag_ms=LAG,
        source_span=(DAY0, DAY0 + history * STEP + 2 * HOUR_MS), scale=SCALE,
        slot_ends=history_slots(history), run_slot=scheduled_slot,
    )  # fmt: skip


def sample(real: list[str], copied: list[str], measured: int | None) -> list[str]:
    """The exports run through the measured hour: all, or ``measured`` of them spread evenly over
    the fleet (the two the runner built among them); the others keep their history untouched."""
    if measured is None or measured >= len(real) + len(copied):
        return [*real, *copied]
    picked = max(1, measured - len(real))  # the first copy too: its hour is compared with the twin's
    return [*real, *(copied[int(i * len(copied) / picked)] for i in range(picked))]


def measure(
    exports: int, postgres: bool, slots: int = 4, history: int = SLOTS_PER_DAY, measured: int | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="seqexport-reconcile-") as tmp, world_for(Path(tmp), postgres) as world:
        started = time.monotonic()
        real, copied = build_world(world, exports, history)
        history_s = time.monotonic() - started
        progress(f"{exports} exports with {history} slots of history in {history_s:.0f} s")
        ids = sample(real, copied, measured)
        # The copy must be what the runner writes: a copy against the twin the runner built on the same rows.
        before_hour = reconcile_history.differences(world, real[1], copied[0]) if copied and len(real) > 1 else []
        hour_start = DAY0 + history * STEP
        write = full = thin = full_real = thin_real = 0.0
        changed = 0
        # The steady state has had a pass before the hour: the thinned rule counts from the last one
        # (`reconcile.rechecked_now`, issue 39), so the measured passes are not a first full check.
        world.clock.now_ms = hour_start + LAG
        reconcile_pass(world, ids, thin=False, runner_built=len(real))
        for k in range(1, slots + 1):
            write += scheduled_slot(world, ids, hour_start + k * STEP)
            # Thinned first: it counts from the previous slot's pass; the full recheck after it reads
            # every window whatever was checked before.
            thin_cpu, _, thin_first = reconcile_pass(world, ids, thin=True, runner_built=len(real))
            full_cpu, full_changed, full_first = reconcile_pass(world, ids, thin=False, runner_built=len(real))
            full_real, thin_real = full_real + full_first, thin_real + thin_first
            full, thin, changed = full + full_cpu, thin + thin_cpu, changed + full_changed
            done = len(ids) * len(DATASETS) * k
            progress(f"slot {k}: CPU-s per window so far: write {write / done:.4f}, full {full / done:.4f},"
                     f" thinned {thin / done:.4f}")  # fmt: skip
        # And what the measured hour wrote for a copy equals what it wrote for the real twin.
        after_hour = reconcile_history.differences(world, real[1], copied[0], since_ms=hour_start) if copied else []
        windows = len(ids) * len(DATASETS) * slots
        real_windows = len(real) * len(DATASETS) * slots
        copied_windows = max(1, len(ids) - len(real)) * len(DATASETS) * slots
        return {
            "database": "postgresql" if postgres else "sqlite",
            "exports": exports,
            "exports_measured": len(ids),
            "exports_by_runner": len(real),
            "exports_copied": len(copied),
            "history_slots": history,
            "windows": windows,
            "history_build_s": round(history_s, 1),
            "copy_differences": before_hour + after_hour,
            "late_windows_appended": changed,
            "write_cpu_s_per_window": write / windows,
            "before_cpu_s_per_window": (write + full) / windows,
            "after_cpu_s_per_window": (write + thin) / windows,
            "reconcile_before_cpu_s_per_window": full / windows,
            "reconcile_after_cpu_s_per_window": thin / windows,
            # The same split by history: the runner's exports against the copies (should match).
            "reconcile_before_cpu_s_per_window_runner_built": full_real / real_windows,
            "reconcile_before_cpu_s_per_window_copied": (full - full_real) / copied_windows,
            "reconcile_after_cpu_s_per_window_runner_built": thin_real / real_windows,
            "reconcile_after_cpu_s_per_window_copied": (thin - thin_real) / copied_windows,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=20)
    parser.add_argument("--postgres", action="store_true", help="control plane and source on PostgreSQL")
    parser.add_argument("--history", type=int, default=SLOTS_PER_DAY, help="quarter-hours of history (96: 24 h)")
    parser.add_argument("--measure", type=int, help="run only this many of the exports through the hour")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.exports, args.postgres, history=args.history, measured=args.measure)
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
