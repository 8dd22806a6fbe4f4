"""What checking source values costs the writers (issue 39, `delivery.values.RowChecker`).

Each round writes the same generated window, gzip JSONL and Parquet, once with the checks and once
with them switched off (the checker replaced by the identity), interleaved; prints the medians of the
process CPU per million rows and the checks' share. Run: ``python -m benchmarks.writer_checks``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter
from seqexport_dagster.delivery.writer import PartWriter
from seqexport_dagster.demo import generator

DAY0 = 20726 * DAY_MS


def rows_of(dataset: str, count: int) -> list[tuple[Any, ...]]:
    rng = random.Random(1)
    subs = generator.subscribers(rng, "acme", 1000, DAY0)
    make = {"email_events": generator.email_events, "custom_events": generator.custom_events}[dataset]
    rows = [r[1:] for r in itertools.islice(make(rng, "acme", subs, DAY0, DAY0 + DAY_MS, count), count)]
    return sorted(rows, key=lambda r: (r[3], r[0]))


def cpu(writer: Any, batches: Sequence[Sequence[Any]], checked: bool) -> float:
    if not checked:
        writer._check = lambda batch: batch  # the writers' one hook for the checks
    start = time.process_time()
    for _ in writer.parts(batches):
        pass
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print("dataset        format    rows     checked CPU-s/M  unchecked CPU-s/M  checks' share")
    for dataset in ("email_events", "custom_events"):
        rows = rows_of(dataset, args.rows)
        batches = [rows[i : i + 5000] for i in range(0, len(rows), 5000)]
        for name, make in (("jsonl.gz", PartWriter), ("parquet", ParquetPartWriter)):
            on: list[float] = []
            off: list[float] = []
            for _ in range(args.rounds):
                on.append(cpu(make(DATASETS[dataset]), batches, True))
                off.append(cpu(make(DATASETS[dataset]), batches, False))
            a, b = statistics.median(on), statistics.median(off)
            per_m = 1e6 / len(rows)
            print(f"{dataset:14} {name:9} {len(rows):8,} {a * per_m:16.2f} {b * per_m:18.2f} {(a - b) / a:14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
