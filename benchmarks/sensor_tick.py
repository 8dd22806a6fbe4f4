"""Scheduler sensor tick at 1,000 active exports (target: <= 1 s).

Builds a control plane with N exports (all four datasets, so every export has work due), a real
SQLite-backed Dagster instance, and times full sensor evaluations through `build_sensor_context`:
resource setup, the control-plane queries, the partition and in-flight-run queries, the policy and
the run requests.

    .venv/bin/python -m benchmarks.sensor_tick [--exports 1000] [--ticks 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS
from seqexport_dagster.definitions import exporter_resources
from seqexport_dagster.defs.resources import ControlPlaneResource, FixedClock, OperatorResource, SourceResource
from seqexport_dagster.delivery.assembly import control_plane_at
from seqexport_dagster.demo.ticker import evaluate_sensor
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.store.crypto import new_key_spec

DAY0 = 20361 * DAY_MS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = new_key_spec("bench")
        url = f"sqlite:///{root / 'control.db'}"
        store = control_plane_at(url, spec)
        store.migrate()
        started = time.perf_counter()
        for i in range(args.exports):
            store.create_export(
                account_id=f"acct{i}",
                destination=DestinationConfig(
                    "s3", f"bucket-{i}", region="us-east-1", access_key_id="AKIA", secret_access_key="s"
                ),
                datasets=list(DATASETS),
                frequency="1h",
                lag_ms=120_000,
                now_ms=DAY0,
            )
        print(f"created {args.exports} exports in {time.perf_counter() - started:.1f} s")
        resources = exporter_resources(
            ControlPlaneResource(database_url=url, secret_keys=spec),
            SourceResource(source_url=f"sqlite:///{root / 'source.db'}"),
            OperatorResource(allow_local="1"),
            FixedClock(at_ms=DAY0 + DAY_MS + 3 * HOUR_MS),
        )
        (root / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
            first = evaluate_sensor(instance, resources)
            for change in first.dynamic_partitions_requests or []:
                if isinstance(change, dg.AddDynamicPartitionsRequest):
                    instance.add_dynamic_partitions(change.partitions_def_name, list(change.partition_keys))
            timings = []
            for _ in range(args.ticks):
                t0 = time.perf_counter()
                result = evaluate_sensor(instance, resources)
                timings.append(time.perf_counter() - t0)
            requests = len(result.run_requests or [])
    median = statistics.median(timings)
    print(
        f"sensor tick at {args.exports} active exports: median {median * 1000:.0f} ms, "
        f"max {max(timings) * 1000:.0f} ms, {requests} run requests per tick "
        f"({'meets' if median <= 1.0 else 'misses'} the 1 s target)"
    )


if __name__ == "__main__":
    main()
