"""``python -m seqexport_dagster_tests.support.sim``: one seed (``--seed``), or new seeds for a time
budget (``--seconds``, what ``make sim`` runs); prints each seed's line, every failing seed's
reproducing command and trace, and the totals: export-days per CPU-second and what was found."""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter

from seqexport_dagster_tests.support.sim.run import SimResult, simulate


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqexport_dagster_tests.support.sim")
    parser.add_argument("--seed", type=int, help="run this seed only")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SECONDS_BUDGET", 60)))
    parser.add_argument("--days", type=float, default=3.0, help="simulated days per seed (then the quiet end)")
    parser.add_argument("--level", type=float, default=1.0, help="fault level (0: none)")
    parser.add_argument("--only", default="", help="comma-separated operations to draw from")
    parser.add_argument("--exports", type=int, default=None, help="exports per world (default 2 to 5)")
    parser.add_argument("--frequencies", default="", help="comma-separated frequencies to draw from")
    parser.add_argument("--formats", default="", help="comma-separated file formats to draw from (default both)")
    parser.add_argument("--more", default=None, help="comma-separated of 'change format,delete' to draw ('' none)")
    parser.add_argument("--export-days", type=float, default=None, help="budget mode: also stop after this many")
    parser.add_argument("--first-seed", type=int, default=None, help="budget mode: start here (default random)")
    args = parser.parse_args(argv)
    kw: dict[str, object] = {"level": args.level}
    if args.exports:
        kw["exports"] = args.exports
    if args.frequencies:
        kw["frequencies"] = tuple(f.strip() for f in args.frequencies.split(","))
    if args.formats:
        kw["formats"] = tuple(f.strip() for f in args.formats.split(","))
    if args.more is not None:
        kw["more"] = tuple(o.strip() for o in args.more.split(",") if o.strip())
    if args.only:
        kw["only"] = tuple(o.strip() for o in args.only.split(","))
    if args.seed is not None:
        result = simulate(args.seed, days=args.days, **kw)  # type: ignore[arg-type]
        say(result.summary())
        say(f"  operations: {dict(result.ops)}\n  faults: {dict(result.faults)}")
        say(f"  formats: {dict(result.formats)}, parts verify read: {dict(result.verified_parts)}")
        return 0 if result.ok else 1
    seed = args.first_seed if args.first_seed is not None else random.SystemRandom().randrange(10**6, 10**9)
    began, results = time.monotonic(), []
    while time.monotonic() - began < args.seconds:
        if args.export_days is not None and sum(r.export_days for r in results) >= args.export_days:
            break
        result = simulate(seed, days=args.days, **kw)  # type: ignore[arg-type]
        results.append(result)
        say(result.summary())
        seed += 1
    say(totals(results))
    return 0 if all(r.ok for r in results) else 1


def totals(results: list[SimResult]) -> str:
    days = sum(r.export_days for r in results)
    cpu = sum(r.cpu_s for r in results) or 1e-9
    found = Counter(v.invariant for r in results for v in r.violations)
    failing = [r.seed for r in results if not r.ok]
    ops = sum((r.ops for r in results), Counter())
    faults = sum((r.faults for r in results), Counter())
    formats = sum((r.formats for r in results), Counter())
    verified = sum((r.verified_parts for r in results), Counter())
    return "\n".join(
        [
            f"{len(results)} seeds, {days:.0f} export-days in {cpu:.0f} CPU-s: {days / cpu:.2f} export-days per CPU-second",
            f"rows written {sum(r.rows for r in results)}, rows checked {sum(r.rows_checked for r in results)}, "
            f"runs {sum(r.runs for r in results)}, worker crashes {sum(r.crashes for r in results)}",
            f"operations: {dict(ops)}",
            f"faults: {dict(faults)}",
            f"exports by format: {dict(formats)}; parts verify read, by format: {dict(verified)}",
            f"found: {dict(found) or 'nothing'}" + (f" (seeds {failing})" if failing else ""),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
