"""What the per-PUT deadline costs: `S3Destination.put` with and without its watch, side by side.

Against a loopback server that answers 200 at once and keeps connections alive (the worst case
for any per-request overhead: nothing else takes time). Rounds alternate the two variants in one
process and the medians are compared.

    .venv/bin/python -m benchmarks.put_deadline [--puts 100] [--rounds 5] [--kib 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from seqexport_dagster.destination import s3_transport
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3 import S3Destination
from seqexport_dagster_tests.support.hostile_server import running


class _NoWatch:
    """The deadline switched off: what a PUT cost before it existed."""

    expired = False

    def __init__(self, seconds: float) -> None:
        del seconds

    def __enter__(self) -> _NoWatch:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def _per_put_ms(config: DestinationConfig, body: bytes, puts: int) -> float:
    destination = S3Destination(config, OperatorPolicy(allow_local=True))
    try:
        destination.put("p/warm-up", body)
        started = time.perf_counter()
        for i in range(puts):
            destination.put(f"p/k{i}", body)
        return (time.perf_counter() - started) * 1000 / puts
    finally:
        destination.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kib", type=int, default=200)
    args = parser.parse_args()
    body = os.urandom(args.kib * 1024)
    seams = vars(s3_transport)  # the one seam measured: the module's `Watch`
    watch: Any = seams["Watch"]
    times: dict[str, list[float]] = {"with deadline": [], "without": []}
    with tempfile.TemporaryDirectory() as folder, running(Path(folder)) as server:
        config = DestinationConfig(
            "s3", "bench", "p", "us-east-1", server.endpoint, "AKIABENCH", secret_access_key="s" * 40
        )
        try:
            for _ in range(args.rounds):
                for label in times:
                    seams["Watch"] = watch if label == "with deadline" else _NoWatch
                    times[label].append(_per_put_ms(config, body, args.puts))
        finally:
            seams["Watch"] = watch
    with_deadline, without = (statistics.median(times[k]) for k in times)
    print(
        f"PUT of {args.kib} KiB over loopback, median of {args.rounds} rounds x {args.puts}: "
        f"with deadline {with_deadline:.2f} ms, without {without:.2f} ms, ratio {with_deadline / without:.3f}"
    )


if __name__ == "__main__":
    main()
