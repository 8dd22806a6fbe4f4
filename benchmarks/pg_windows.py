"""Small PostgreSQL windows to Parquet, one process, the source's connections reused or opened per window.

A run worker writes many small windows (a day of 15-minute windows is 96). The window read
(`source/csv_read.py`, psycopg2's COPY from the engine's pool; before it ADBC's, whose database read
PostgreSQL's type catalog when opened: `source/arrow_read.py` keeps it) should cost little beyond
its rows. This measures it per window: the same windows read and written (`ParquetPartWriter`, no
destination) with the engine's connections kept (``reuse``) and with them closed before every
window (``fresh``: ``engine.dispose()``, which closes the pool's and ADBC's), interleaved, the order
reversed every round.

``python -m benchmarks.pg_windows --url postgresql+psycopg2://postgres@127.0.0.1:5432/seqexport_bench_200000``
(the compare section's window-sized database; `benchmarks.data.ensure_postgres` loads it). Prints
one JSON line: per mode, CPU and wall milliseconds per window, median of the rounds (min-max).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from benchmarks.data import ACCOUNT, DAY0


def _windows(reader: Any, writer: Any, windows: list[Any], fresh: bool, engine: Any) -> tuple[float, float, int]:
    rows = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for window in windows:
        if fresh:
            engine.dispose()  # every window opens its own connection
        for part in writer.parts(reader.window_record_batches("email_events", ACCOUNT, window)):
            rows += part.rows
    return time.process_time() - cpu, time.perf_counter() - wall, rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pg_windows", description=__doc__)
    parser.add_argument("--url", required=True, help="a PostgreSQL source holding the benchmark's email events")
    parser.add_argument("--window-s", type=int, default=60, help="window length in seconds (default 60)")
    parser.add_argument("--windows", type=int, default=20, help="windows per mode and round (default 20)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.contract.window import Window
    from seqexport_dagster.delivery.assembly import source_at
    from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter

    reader = source_at(args.url)
    writer = ParquetPartWriter(DATASETS["email_events"])
    step = args.window_s * 1000
    windows = [Window(DAY0 + i * step, DAY0 + (i + 1) * step) for i in range(args.windows)]
    _windows(reader, writer, windows[:2], False, reader.engine)  # imports and the driver's library
    found: dict[str, list[tuple[float, float, int]]] = {"fresh": [], "reuse": []}
    for r in range(args.rounds):
        for mode in ("fresh", "reuse") if r % 2 == 0 else ("reuse", "fresh"):
            found[mode].append(_windows(reader, writer, windows, mode == "fresh", reader.engine))
    reader.engine.dispose()
    out: dict[str, Any] = {"window_s": args.window_s, "windows": args.windows, "rounds": args.rounds}
    for mode, runs in found.items():
        cpu = [1000 * c / args.windows for c, _, _ in runs]
        wall = [1000 * w / args.windows for _, w, _ in runs]
        out[mode] = {
            "rows_per_window": runs[0][2] / args.windows,
            "cpu_ms_per_window": [round(statistics.median(cpu), 2), round(min(cpu), 2), round(max(cpu), 2)],
            "wall_ms_per_window": [round(statistics.median(wall), 2), round(min(wall), 2), round(max(wall), 2)],
        }
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main()) + "\n")
