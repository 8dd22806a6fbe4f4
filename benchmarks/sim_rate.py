"""The simulator's rate before and after a change, and proof that the change left every seed's
history as it was (issue 22: a faster simulator must simulate the same thing).

    python -m benchmarks.sim_rate --before /path/to/old/checkout [--after .] [--sets ci,reg,new]

Each seed runs once in each tree, in a fresh process, the two interleaved (the order flips from
seed to seed, so a host getting busier or quieter weighs on both). A seed's CPU-s is its own
(`SimResult.cpu_s`: imports and the template databases left out, as `make sim` counts it). Its
history is compared field by field: `SimResult`'s counts (rows, rows checked, runs, crashes,
operations, faults, formats, parts verify read, export-days, violations), plus digests of every
operation line (time, export, what, outcome), of every object in every bucket (key and MD5; a connection test's random token left out) and
every send that reached a bucket (sequence, time, key, answer), the final clock and the faults
injected. Any difference is printed and the exit code is 1.

The child is this file run with ``runpy`` inside the tree measured (``PYTHONPATH`` = that tree),
so a tree without this benchmark can still be measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

PRE = {"more": ("change format",)}  # the seeds that predate deletes (test_simulation.PREDATES_DELETE)
SETS: dict[str, list[tuple[int, float, dict[str, Any]]]] = {
    # test_simulation.CI_SEEDS, as CI runs them
    "ci": [(s, 1.5, PRE if s <= 8 else {}) for s in (1, 2, 3, 5, 6, 7, 8, 9, 12)],
    # regression seeds (test_simulation.REGRESSION_SEEDS)
    "reg": [
        (4, 2.0, PRE),
        (100, 2.0, {"only": ("move prefix", "move bucket"), "level": 0.0}),
        (200, 2.0, {"only": ("export now", "revoke key"), "level": 0.0}),
        (203, 2.0, {"only": ("export now", "revoke key"), "level": 0.0}),
    ],
    # new seeds in the default world `make sim` draws (3 days, deletes and format changes)
    "new": [(s, 3.0, {}) for s in (123456, 777001, 10000001)],
}
#: Fields that are measurements, not history.
NOT_HISTORY = {"cpu_s"}


def child(seed: int, days: float, world_kw: dict[str, Any]) -> dict[str, Any]:
    """One seed in this process: its fingerprint and CPU-s (run inside the measured tree)."""
    from seqexport_dagster_tests.support.sim import world as sim_world
    from seqexport_dagster_tests.support.sim.run import simulate

    seen: dict[str, Any] = {}
    dispose = sim_world.World.dispose

    def fingerprint_then_dispose(world: Any) -> None:
        ops = hashlib.sha256()
        for op in world.ops:
            ops.update(op.line().encode() + b"\n")
        store = hashlib.sha256()
        for name in sorted(world.buckets.by_name):
            bucket = world.buckets.by_name[name]
            for key in sorted(bucket.objects, key=_stable):
                body = b"" if _stable(key) != key else bucket.objects[key]
                store.update(f"{name}/{_stable(key)}:{hashlib.md5(body).hexdigest()}\n".encode())
            for w in bucket.writes:
                store.update(
                    f"{w.seq} {w.at_ms} {_stable(w.key)} {w.answer} {w.conditional} {w.plain_intended}\n".encode()
                )
            for v in bucket.violations:
                store.update(v.encode() + b"\n")
        seen.update(op_lines=ops.hexdigest()[:16], bucket=store.hexdigest()[:16], clock=world.clock())
        seen["faults_injected"] = sum(world.faults.injected.values())
        dispose(world)

    sim_world.World.dispose = fingerprint_then_dispose  # type: ignore[method-assign]
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in world_kw.items()}
    r = simulate(seed, days=days, **kw)
    return {
        "seed": seed,
        "days": days,
        "export_days": round(r.export_days, 6),
        "rows": r.rows,
        "rows_checked": r.rows_checked,
        "runs": r.runs,
        "crashes": r.crashes,
        "ops": dict(sorted(r.ops.items())),
        "faults": dict(sorted(r.faults.items())),
        "formats": dict(sorted(r.formats.items())),
        "verified_parts": dict(sorted(r.verified_parts.items())),
        "violations": [v.line() for v in r.violations],
        "cpu_s": r.cpu_s,
        **seen,
    }


def _stable(key: str) -> str:
    """A connection test's object is named (and filled) with a random token (`connection_test`:
    two tests never collide), the one thing of a seed that differs from run to run: compared by
    its place and time only."""
    return re.sub(r"connection-test-(probe-)?[0-9a-f]+\.txt$", "connection-test-TOKEN.txt", key)


def run_in(tree: Path, seed: int, days: float, world_kw: dict[str, Any]) -> dict[str, Any]:
    code = (
        "import json, runpy, sys; "
        f"m = runpy.run_path({str(Path(__file__).resolve())!r}, run_name='sim_rate_child'); "
        f"print('RESULT ' + json.dumps(m['child']({seed}, {days}, json.loads(sys.argv[1]))))"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(world_kw)], cwd=tree, env=env, capture_output=True, text=True
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"seed {seed} in {tree} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_rate")
    parser.add_argument("--before", type=Path, required=True, help="checkout of the code before the change")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--sets", default="ci,reg,new", help=f"comma-separated of {sorted(SETS)}")
    parser.add_argument("--out", type=Path, help="write every measurement here (JSON)")
    args = parser.parse_args(argv)
    specs = [spec for name in args.sets.split(",") for spec in SETS[name.strip()]]
    rows: list[dict[str, Any]] = []
    differ: list[str] = []
    for i, (seed, days, kw) in enumerate(specs):
        order = [("before", args.before), ("after", args.after)]
        got = {side: run_in(tree, seed, days, kw) for side, tree in (order if i % 2 == 0 else order[::-1])}
        b, a = got["before"], got["after"]
        changed = sorted(k for k in set(a) | set(b) if k not in NOT_HISTORY and a.get(k) != b.get(k))
        if changed:
            differ.append(f"seed {seed}: {', '.join(f'{k}: {b.get(k)} -> {a.get(k)}' for k in changed)}")
        rows.append({"seed": seed, "days": days, "before": b, "after": a, "same_history": not changed})
        print(
            f"seed {seed} ({days:g} days, {b['export_days']:.1f} export-days): before {b['cpu_s']:.2f} CPU-s, "
            f"after {a['cpu_s']:.2f} CPU-s ({b['cpu_s'] / max(a['cpu_s'], 1e-9):.2f}x), "
            f"history {'identical' if not changed else 'DIFFERENT: ' + ', '.join(changed)}",
            flush=True,
        )
    days_total = sum(r["before"]["export_days"] for r in rows)
    cpu_b = sum(r["before"]["cpu_s"] for r in rows)
    cpu_a = sum(r["after"]["cpu_s"] for r in rows)
    print(
        f"{len(rows)} seeds, {days_total:.1f} export-days: before {days_total / cpu_b:.2f} export-days per CPU-s "
        f"({cpu_b:.1f} CPU-s), after {days_total / cpu_a:.2f} ({cpu_a:.1f} CPU-s): {cpu_b / cpu_a:.2f}x; "
        f"histories {'identical' if not differ else 'DIFFERENT'}"
    )
    for line in differ:
        print("  " + line)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1, sort_keys=True))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
