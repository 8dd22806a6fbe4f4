"""The `seqexport` command line. It only parses and prints; the work is done by the core and the API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from seqexport_dagster.errors import ExportError


def _demo(args: argparse.Namespace) -> int:
    from seqexport_dagster.demo import run_demo  # noqa: PLC0415 - keep `seqexport --help` fast

    def progress(line: str) -> None:
        print(line, file=sys.stderr)

    summary = run_demo(Path(args.home), Path(args.dest_dir) if args.dest_dir else None, progress=progress)
    if args.json:
        print(
            json.dumps(
                {
                    "home": str(summary.home),
                    "exports": [
                        {"account_id": e.account_id, "export_id": e.export_id, "root": str(e.root)}
                        for e in summary.exports
                    ],
                    "windows": summary.windows,
                    "files": summary.files,
                    "rows": summary.rows,
                    "bytes": summary.bytes,
                    "seconds": round(summary.seconds, 3),
                    "duckdb_query": summary.duckdb_query(),
                }
            )
        )
        return 0
    print(
        f"\nExported {summary.rows:,} rows in {summary.windows} windows, {summary.files} files, "
        f"{summary.bytes / 1e6:.2f} MB, in {summary.seconds:.1f} s."
    )
    for e in summary.exports:
        print(f"  {e.account_id:8} {e.export_id}  ->  {e.root}")
    print("\nQuery the files with DuckDB:\n")
    print(f"  {summary.duckdb_query()}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqexport", description="Sequenzy Data Exports")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="build demo data for two accounts and export it into local folders")
    demo.add_argument("--home", default=".demo", help="demo folder, rebuilt on each run (default .demo)")
    demo.add_argument("--dest-dir", help="make DIR the root of the first account's export")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
