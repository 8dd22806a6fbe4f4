"""The engine at two revisions, interleaved: does a change (a refactor, a move) cost the engine CPU?

Each round runs ``benchmarks.child engine`` (``Runner.write_window`` of one window, SQLite source to
gzip JSONL parts in a local folder) once in each tree, alternating which goes first, then the floor
(the same four steps streamed alone) in each. Every run is its own process whose code is its tree's
own: a tree is a ``git archive`` of its revision (the package and the benchmarks), or this tree as
it is, and ``-m`` with the tree as cwd puts it on ``sys.path`` before the editable install. A
neighbour's burst of load hits both trees alike; the median of each is kept and the ratio
after/before is printed, raw and normalised by each tree's floor of the same round (the floor is
the same code in both, so its ratio is the noise).

    python -m benchmarks.engine_revs --before-rev ed2121c [--after-rev HEAD] [--rows 1000000] [--rounds 5]
        [--window ROWS] [--format parquet] [--source-url postgresql+psycopg2://...] [--no-floor] [--out f.json]

``--window`` picks another window of the generated day (10,000, ``--rows`` or 5 × ``--rows``: the
RSS section's sizes), ``--format parquet`` writes Parquet parts, and ``--source-url`` reads the same
window from another database holding the day's rows (PostgreSQL: `benchmarks.data.ensure_postgres`).
Peak RSS (``VmHWM`` of each run's process) is reported beside the CPU, median (min-max) per tree.

With ``--after-rev`` both trees are archives, so neither has a head start (compiled modules, the
file cache); running a revision against itself (``--before-rev X --after-rev X``) measures the noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import data
from benchmarks.child import CONTROL_TEMPLATE
from benchmarks.revisions import export_revision
from benchmarks.run import migrated_control_plane

ROOT = Path(__file__).resolve().parent.parent
#: What a revision's tree holds: the package, and the benchmark child that runs it.
TREE = ("seqexport_dagster", "benchmarks")


def run_in(tree: Path, task: str, params: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.child", task, json.dumps(params)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{task} in {tree} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def cpu_per_million(r: dict[str, Any]) -> float:
    return float(r["cpu"]) / float(r["rows"]) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_revs", description=__doc__.splitlines()[0])
    parser.add_argument("--before-rev", required=True, help="git revision of the 'before' code")
    parser.add_argument("--after-rev", help="git revision of the 'after' code (default: this tree, as it is)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the window (default 1M)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--data-dir", type=Path, default=data.DATA_DIR, help="where the generated source is cached")
    parser.add_argument("--window", type=int, help="rows of the window measured (default --rows)")
    parser.add_argument("--format", default="jsonl.gz", choices=("jsonl.gz", "parquet"))
    parser.add_argument("--source-url", help="read the window from this database instead of the generated SQLite file")
    parser.add_argument("--subscribers", type=int, default=1_000, help="subscribers of the generated source")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor runs (no normalised ratio)")
    parser.add_argument("--out", type=Path, help="also write the raw runs and medians here as JSON")
    args = parser.parse_args(argv)

    src = data.ensure_source(args.rows, args.subscribers, args.data_dir)
    to_ms, rows = src.windows[args.window or args.rows]
    kinds = ("before", "after") if args.no_floor else ("before", "after", "before_floor", "after_floor")
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        before = export_revision(args.before_rev, Path(tmp) / "before", TREE)
        after = export_revision(args.after_rev, Path(tmp) / "after", TREE) if args.after_rev else ROOT
        trees = {"before": before, "after": after}
        # A migrated control plane each run copies, as the rss and compare sections do: the measured
        # process then never imports Alembic (~10 MB of peak RSS no run worker carries).
        migrated_control_plane(Path(tmp) / CONTROL_TEMPLATE)
        url = args.source_url or src.url
        params = {"source_url": url, "source_path": str(src.path), "to_ms": to_ms, "tmp": tmp, "format": args.format}
        print(
            f"engine, {args.format}, {rows:,} rows, {args.rounds} rounds: before {args.before_rev}, "
            f"after {args.after_rev or 'this tree'}",
            file=sys.stderr,
        )
        for round_ in range(args.rounds):
            order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
            for name in order:
                runs[name].append(run_in(trees[name], "engine", params))
            if not args.no_floor:
                for name in order:
                    runs[f"{name}_floor"].append(run_in(trees[name], "floor", params | {"source_url": src.url}))
            shown = {k: round(cpu_per_million(v[-1]), 3) for k, v in runs.items()}
            print(f"  round {round_ + 1}: CPU-s per million rows {shown}", file=sys.stderr, flush=True)

    medians = {k: statistics.median(cpu_per_million(r) for r in v) for k, v in runs.items()}
    result: dict[str, Any] = {
        "before_rev": args.before_rev,
        "after_rev": args.after_rev or "this tree",
        "format": args.format,
        "source": "postgresql" if (args.source_url or "").startswith("postgresql") else "sqlite",
        "rows": rows,
        "rounds": args.rounds,
        "cpu_s_per_million_rows": {k: round(v, 3) for k, v in medians.items()},
        "after_over_before": round(medians["after"] / medians["before"], 3),
        "spread": {
            k: [round(min(cpu_per_million(r) for r in v), 3), round(max(cpu_per_million(r) for r in v), 3)]
            for k, v in runs.items()
        },  # fmt: skip
        "peak_rss_mb": {
            k: [
                round(statistics.median(r["peak_rss_mb"] for r in runs[k]), 1),
                round(min(r["peak_rss_mb"] for r in runs[k]), 1),
                round(max(r["peak_rss_mb"] for r in runs[k]), 1),
            ]
            for k in ("before", "after")
        },  # fmt: skip
        "bytes": {k: sorted({r.get("bytes") for r in runs[k]}) for k in ("before", "after")},
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    if not args.no_floor:
        result["floor_after_over_before"] = round(medians["after_floor"] / medians["before_floor"], 3)
        result["after_over_before_normalised_by_floor"] = round(
            statistics.median(
                (cpu_per_million(a) / cpu_per_million(af)) / (cpu_per_million(b) / cpu_per_million(bf))
                for a, af, b, bf in zip(
                    runs["after"], runs["after_floor"], runs["before"], runs["before_floor"], strict=True
                )
            ),
            3,
        )
    if args.out:
        args.out.write_text(json.dumps(result | {"runs": runs}, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
