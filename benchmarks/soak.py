"""Soak: one hour of simulated time, 50 exports at mixed frequencies, random store faults, nothing lost.

``python -m benchmarks.soak [--exports 50] [--seed 1] [--minutes 60]``

A real moto server behind the fault proxy; the control plane and source on SQLite; a simulated clock
that starts at 23:10 UTC so every frequency (15 min to 24 h) and the daily subscriber snapshot fall
due inside the hour. Every 30 simulated seconds the scheduler's own policy (`planner.due_work`:
due windows, lag, backoff) picks the work and `planner.batch` groups it into runs, each executed
by a `BatchRunner` (exports on threads, each under its writer lease) as a batched Dagster run does.
Throughout, 3 % of PUTs get 503 SlowDown, 2 % 500, 1 % 400 RequestTimeout, 1 % a reset in the
middle of the upload; every 10 simulated minutes one export's bucket denies access for 10 minutes.
Late rows (recorded inside already exported windows) are added along the way.

At the end the faults stop and a drain runs the remaining work with "export now" (which skips the
backoff, as a customer or operator would), the reconciliation pass picks up the late rows, and every
bucket is audited. Exit status 1 if any row is missing or duplicated.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, iso_ms
from seqexport_dagster.delivery.batch import BatchRunner
from seqexport_dagster.delivery.planner import batch, due_work
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.store.lease import Leases
from seqexport_dagster_tests.support import moto_server
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import destination_factory, s3_export, s3_runner
from seqexport_dagster_tests.support.world import DAY0, sqlite_world

FREQUENCIES = ("15m", "1h", "6h", "24h")
DATASETS = ("email_events", "sms_events", "custom_events", "subscribers")
SCALE = Scale(subscribers=40, email_sends_per_hour=16, sms_sends_per_hour=4, custom_per_hour=8)
TICK_MS = 30_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=50)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--write-once",
        action="store_true",
        help="a bucket that refuses overwrites (GCS Storage Object Creator): exports are GCS exports",
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.monotonic()
    moto = moto_server.start()
    proxy = fp.FaultProxy(moto.port, seed=args.seed, write_once=args.write_once)
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            sqlite_world(Path(tmp), now_ms=DAY0 + 23 * HOUR_MS + 10 * MINUTE_MS) as world,
        ):
            return soak(world, moto, proxy, rng, args.exports, args.minutes, started)
    finally:
        proxy.close()
        moto.stop()


def soak(world, moto, proxy, rng: random.Random, n_exports: int, minutes: int, started: float) -> int:  # type: ignore[no-untyped-def]
    s3 = moto.admin_client()
    start = world.clock()
    end = start + minutes * MINUTE_MS
    exports = []
    for i in range(n_exports):
        account = f"acct{i:02d}"
        generate_account(world.source_engine, account, start - HOUR_MS, end + HOUR_MS, seed=i, scale=SCALE)
        exports.append(s3_export(world, s3, proxy, account_id=account, datasets=DATASETS, frequency=FREQUENCIES[i % 4]))
    frequency = {e.id: e.frequency for e in exports}
    runner = s3_runner(world, part_limit=20, read_timeout=2.0)
    for fault in (
        fp.slow_down(times=None, probability=0.03),
        fp.internal_error(times=None, probability=0.02),
        fp.request_timeout(times=None, probability=0.01),
        fp.reset(times=None, probability=0.01),
    ):
        proxy.add(fault)
    stats: Counter[str] = Counter()
    denied: fp.Fault | None = None
    late = 0
    tick = 0
    while world.clock() < end:
        now = world.clock()
        if tick % 20 == 0:  # every 10 simulated minutes, another bucket denies access for 10 minutes
            if denied is not None:
                proxy.remove(denied)
            victim = rng.choice(exports)
            bucket = world.store.destination_config(victim.id)[0].bucket
            denied = proxy.add(fp.access_denied(match=f"/{bucket}/"))
            stats["access outages"] += 1
        if tick % 10 == 5:  # late rows, recorded inside a window that may already be exported
            victim = rng.choice(exports)
            recorded = now - rng.randrange(10 * MINUTE_MS, 40 * MINUTE_MS)
            rows = [
                (victim.account_id, f"eev_late_{tick}_{j}", "delivered", iso_ms(recorded - 5), iso_ms(recorded + j),
                 f"sub_{victim.account_id}_0000001", "late@example.com", None, None, f"msg_late_{tick}", "Late",
                 None, None, None, None, None)
                for j in range(3)
            ]  # fmt: skip
            late += insert_rows(world.source_engine, "email_events", rows)
        run_due(world, runner, stats, now)
        world.clock.advance(TICK_MS)
        tick += 1
    if denied is not None:
        proxy.remove(denied)
    proxy.clear()
    faults = Counter(r.fault for r in proxy.log if r.fault)
    # Drain: whatever is still due or waiting out a backoff, now with "export now".
    world.clock.now_ms = end
    for _ in range(5):
        pending = [e for e in world.store.active_exports() if any(s.failures for s in e.datasets)]
        for e in pending:
            world.store.request_export_now(e.id, world.clock())
            stats["drained exports"] += 1
        if not run_due(world, runner, stats, world.clock()) and not pending:
            break
    repaired = 0
    for e in exports:
        repaired += sum(1 for r in reconcile(runner, e.id) if r.changed)
    totals: Counter[str] = Counter()
    by_frequency: dict[str, Counter[str]] = {f: Counter() for f in FREQUENCIES}
    problems: list[str] = []
    for e in exports:
        bucket = world.store.destination_config(e.id)[0].bucket
        report = audit_export(world.store, world.source_engine, s3, e.id, put_order=proxy.put_keys_in_order(bucket))
        problems += [f"{e.id}: {p}" for p in report.all_problems()]
        committed = [w for w in world.store.ledger(e.id) if w.status == "committed"]
        for key, value in (
            ("exports", 1),
            ("windows", len(committed)),
            ("files", sum(w.parts for w in committed)),
            ("expected", report.expected),
            ("found", report.found),
            ("duplicated", report.duplicated),
            ("missing", report.missing),
        ):
            totals[key] += value
            by_frequency[frequency[e.id]][key] += value
        snapshot = e.dataset_state("subscribers")
        state = world.store.get_export(e.id).dataset_state("subscribers")
        if snapshot is not None and state is not None and state.position_ms < DAY0 + DAY_MS:
            problems.append(f"{e.id}: the snapshot of {iso_ms(DAY0)[:10]} was never completed")
    print_summary(by_frequency, totals, faults, stats, late, repaired, minutes, time.monotonic() - started)
    for problem in problems[:20]:
        print("PROBLEM", problem)
    print(f"PUTs to an existing key: {len(proxy.overwrites)} (answered 412: {len(proxy.precondition_hits)})")
    lost = totals["missing"] or totals["duplicated"] or problems or proxy.overwrites
    print("RESULT:", "FAIL" if lost else "PASS: nothing lost, nothing duplicated, nothing overwritten")
    return 1 if lost else 0


def run_due(world, runner, stats: Counter[str], now: int) -> int:  # type: ignore[no-untyped-def]
    """One scheduler tick: what `planner.due_work` says, grouped by `planner.batch` into runs, each
    run a `BatchRunner` (threads, writer leases), as the sensor + batched runs would."""
    items = due_work(world.store.active_exports(), now)
    for group in batch(items):
        stats["runs"] += 1
        run_id = f"soak-{stats['runs']}"
        runs = BatchRunner(
            lambda **kw: world.runner(part_limit=20, destination_factory=destination_factory(read_timeout=2.0), **kw),
            world.store, Leases(world.store.engine), holder=run_id, clock=world.clock, workers=4, retry_delays_s=(),
        )  # fmt: skip
        report = runs.run(group.export_ids, [group.day], group.datasets, run_id=run_id, rewrite=False)
        for outcome in report.outcomes.values():
            for _dataset, message in outcome.errors:
                stats[f"failed: {message.split(':')[0][:40]}"] += 1
    return len(items)


def print_summary(by_frequency, totals, faults, stats, late, repaired, minutes, wall) -> None:  # type: ignore[no-untyped-def]
    print(f"Soak: {minutes} simulated minutes, {totals['exports']} exports, wall {wall:.0f} s")
    print()
    print("| frequency | exports | windows | files | rows expected | found | duplicated | missing |")
    print("|-----------|---------|---------|-------|---------------|-------|------------|---------|")
    for name, c in [*by_frequency.items(), ("all", totals)]:
        print(
            f"| {name} | {c['exports']} | {c['windows']} | {c['files']} | {c['expected']} | {c['found']} "
            f"| {c['duplicated']} | {c['missing']} |"
        )
    print()
    print("Faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    print("Runs and failures: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    print(f"Late rows inserted: {late}; windows given late rows by reconciliation: {repaired}")


if __name__ == "__main__":
    sys.exit(main())
