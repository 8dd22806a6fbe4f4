"""``python -m seqexport_dagster_tests.support.sim``: one seed (``--seed``), or new seeds for a time
budget (``--seconds``, what ``make sim`` runs) or an export-day budget (``--export-days``, with
``--jobs`` processes: ``make sim-long``); prints each seed's line, a progress line every minute,
every failing seed's reproducing command and trace, and the totals (`budget.totals`): export-days
per CPU-second, rows lost, duplicated and objects replaced, and what was found."""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys

from seqexport_dagster_tests.support.sim.budget import run_seeds, totals
from seqexport_dagster_tests.support.sim.run import simulate


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqexport_dagster_tests.support.sim")
    parser.add_argument("--seed", type=int, help="run this seed only")
    parser.add_argument(
        "--seconds", type=float, default=None, help="wall-time budget (default 60; none with --export-days alone)"
    )
    parser.add_argument("--days", type=float, default=3.0, help="simulated days per seed (then the quiet end)")
    parser.add_argument("--level", type=float, default=1.0, help="fault level (0: none)")
    parser.add_argument("--only", default="", help="comma-separated operations to draw from")
    parser.add_argument("--exports", type=int, default=None, help="exports per world (default 2 to 5)")
    parser.add_argument("--frequencies", default="", help="comma-separated frequencies to draw from")
    parser.add_argument("--formats", default="", help="comma-separated file formats to draw from (default both)")
    parser.add_argument("--more", default=None, help="comma-separated of 'change format,delete' to draw ('' none)")
    parser.add_argument(
        "--fault-streams",
        type=int,
        default=None,
        help="1: no faults in the control-plane calls added after long run #3 (its seeds as found)",
    )
    parser.add_argument(
        "--wide",
        type=int,
        default=2,
        help="2 (default): the widened world of issue 39 (sparse and delayed schedules, daemon outages, fault "
        "storms, hostile values) with bad source values fixed later, and small parts (sim/bad_values.py); "
        "1: the widened world its seeds before bad values were found in; 0: the world older seeds were found in",
    )
    parser.add_argument(
        "--no-azure", action="store_true", help="no Azure exports (issue 45): every export is an S3-family one"
    )
    parser.add_argument(
        "--parquet-share", type=float, default=None, help="of the exports created, the share in Parquet (default 0.4)"
    )
    parser.add_argument(
        "--table-share",
        type=float,
        default=None,
        help="of the Parquet exports created, the share that keep a Delta table (default 0.5)",
    )
    parser.add_argument("--export-days", type=float, default=None, help="budget mode: stop after this many")
    parser.add_argument("--jobs", type=int, default=1, help="budget mode: seeds run in this many processes")
    parser.add_argument("--first-seed", type=int, default=None, help="budget mode: start here (default random)")
    args = parser.parse_args(argv)
    kw: dict[str, object] = {"level": args.level, "wide": args.wide}
    if args.exports:
        kw["exports"] = args.exports
    if args.frequencies:
        kw["frequencies"] = tuple(f.strip() for f in args.frequencies.split(","))
    if args.formats:
        kw["formats"] = tuple(f.strip() for f in args.formats.split(","))
    if args.more is not None:
        kw["more"] = tuple(o.strip() for o in args.more.split(",") if o.strip())
    if args.fault_streams is not None:
        kw["fault_streams"] = args.fault_streams
    if args.no_azure:
        kw["azure"] = False
    for name, share in (("parquet_share", args.parquet_share), ("table_share", args.table_share)):
        if share is not None:
            if not 0.0 <= share <= 1.0:
                parser.error(f"--{name.replace('_', '-')} must be between 0 and 1, not {share}")
            kw[name] = share
    if args.only:
        kw["only"] = tuple(o.strip() for o in args.only.split(","))
    if args.seed is not None:
        result = simulate(args.seed, days=args.days, **kw)  # type: ignore[arg-type]
        say(result.summary())
        say(f"  operations: {dict(result.ops)}\n  faults: {dict(result.faults)}")
        say(f"  formats: {dict(result.formats)}, parts verify read: {dict(result.verified_parts)}")
        if result.ok:  # a failing seed's summary has it: the same digest, the same history
            say(f"  history: {result.history[:16]}")
        say(
            f"  late rows timed against the bound: {result.late_timed} (largest delay after visibility "
            f"{result.late_worst_ms / 60_000:.0f} min); not timed: {dict(result.late_untimed)}"
        )
        if result.table_only_files:
            say(
                f"  table-only files (stranded parts of a move, in a later place's table): {result.table_only_files}"
                f" ({result.table_replaced_files} of replaces left unfinished by a move)"
            )
        if result.table_known:
            say(f"  table oracle, documented limits met: {dict(result.table_known)}")
        return 0 if result.ok else 1
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    seconds = args.seconds
    if seconds is None and args.export_days is None:
        seconds = float(os.environ.get("SECONDS_BUDGET", 60))
    seed = args.first_seed if args.first_seed is not None else random.SystemRandom().randrange(10**6, 10**9)
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by PID: still print the totals so far
    results, wall_s, cpu_all_s = run_seeds(
        seed, days=args.days, world_kw=kw, jobs=args.jobs, seconds=seconds, export_days=args.export_days, say=say
    )
    say(totals(results, wall_s, cpu_all_s))
    return 0 if results and all(r.ok for r in results) else 1


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
