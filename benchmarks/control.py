"""Control-loop measurements: the scheduler sensor's tick, and the CPU of one run worker."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.data import DAY0
from benchmarks.procinfo import peak_rss_mb
from seqexport_dagster_tests.support.processes import daemon_env

_FREQUENCIES = ("15m", "1h", "6h", "24h")


def tick(p: dict[str, Any]) -> dict[str, Any]:
    """The scheduler sensor's full evaluation (``build_sensor_context`` + resources + control-plane
    queries + partition and in-flight-run queries + policy + run requests, the same path as
    ``benchmarks/sensor_tick.py``) over ``p['exports']`` exports of four datasets each, against a
    real Dagster instance on SQLite. The first tick registers the exports as partitions (not
    timed); the median of the next 5 is reported, and the pure policy part (list_exports +
    planner.due_work) separately."""
    import dagster as dg

    from seqexport_dagster.contract.window import HOUR_MS
    from seqexport_dagster.definitions import exporter_resources
    from seqexport_dagster.defs.resources import (
        ControlPlaneResource,
        FixedClock,
        OperatorResource,
        SourceResource,
    )
    from seqexport_dagster.delivery.assembly import control_plane_at
    from seqexport_dagster.delivery.planner import due_work
    from seqexport_dagster.demo.ticker import evaluate_sensor
    from seqexport_dagster.store.crypto import new_key_spec

    n = int(p["exports"])
    now = DAY0 + 26 * HOUR_MS
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        spec, url = new_key_spec("bench"), f"sqlite:///{tmp}/control.db"
        store = control_plane_at(url, spec)
        store.migrate()
        _bulk_exports(store, n, DAY0 + 5 * 60_000)
        resources = exporter_resources(
            ControlPlaneResource(database_url=url, secret_keys=spec),
            SourceResource(source_url=f"sqlite:///{tmp}/source.db"),
            OperatorResource(allow_local="1"),
            FixedClock(at_ms=now),
        )
        Path(tmp, "dagster").mkdir()
        with dg.instance_for_test(temp_dir=f"{tmp}/dagster") as instance:
            first = evaluate_sensor(instance, resources)
            for change in first.dynamic_partitions_requests or []:
                if isinstance(change, dg.AddDynamicPartitionsRequest):
                    instance.add_dynamic_partitions(change.partitions_def_name, list(change.partition_keys))
            ticks, policy, requests, exports_requested = [], [], 0, 0
            for _ in range(5):
                t0 = time.perf_counter()
                result = evaluate_sensor(instance, resources)
                ticks.append(time.perf_counter() - t0)
                requests = len(result.run_requests or [])
                exports_requested = sum(int(r.tags["seqexport/exports"]) for r in result.run_requests or [])
                t0 = time.perf_counter()
                due_work(store.list_exports(), now)
                policy.append(time.perf_counter() - t0)
        store.engine.dispose()
    return {
        "wall": statistics.median(ticks),
        "cpu": 0.0,
        "rows": 0,
        "tick_s": statistics.median(ticks),
        "policy_s": statistics.median(policy),
        "ticks": len(ticks),
        "requests": requests,
        "exports_requested": exports_requested,
        "via": "seqexport_dagster.demo.ticker.evaluate_sensor (as benchmarks/sensor_tick.py)",
    }


def _bulk_exports(store: Any, n: int, created: int) -> None:
    """``n`` exports of four datasets with the frequencies mixed: one made by ``create_export``
    (sealed secret and all), the others copied from it in one transaction (3,000 separate
    create_export transactions would take minutes on SQLite)."""
    import sqlalchemy as sa

    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster.store.tables import export_datasets, exports

    template = store.create_export(
        account_id="acct0",
        destination=DestinationConfig(
            "s3",
            "customer-bucket",
            prefix="sequenzy",
            region="us-east-1",
            access_key_id="AKIAEXAMPLE",
            secret_access_key="secret",
        ),  # fmt: skip
        datasets=("email_events", "sms_events", "custom_events", "subscribers"),
        frequency=_FREQUENCIES[0],
        lag_ms=120_000,
        now_ms=created,
    )
    with store.engine.begin() as conn:
        row = dict(conn.execute(sa.select(exports).where(exports.c.id == template.id)).mappings().one())
        sets = [dict(r) for r in conn.execute(
            sa.select(export_datasets).where(export_datasets.c.export_id == template.id)).mappings()]  # fmt: skip
        new_exports, new_sets = [], []
        for i in range(1, n):
            export_id = f"exp_bench{i:08d}"
            new_exports.append(row | {"id": export_id, "account_id": f"acct{i}",
                                      "frequency": _FREQUENCIES[i % len(_FREQUENCIES)], "prefix": f"sequenzy/{i}"})  # fmt: skip
            new_sets += [{k: v for k, v in d.items() if k != "id"} | {"export_id": export_id} for d in sets]
        if new_exports:
            conn.execute(exports.insert(), new_exports)
            conn.execute(export_datasets.insert(), new_sets)


def worker(p: dict[str, Any]) -> dict[str, Any]:
    """CPU of one run worker: ``dagster asset materialize`` of one day for ``p['exports']`` exports
    (a batch; three event datasets, a small account each) in a fresh process, as the run launcher
    would start it. Includes the interpreter, importing Dagster and loading the definitions, which
    dominate for small days: the per-export cost falls as the batch grows."""
    import json

    import dagster as dg
    import sqlalchemy as sa

    from seqexport_dagster.contract.window import DAY_MS, day_of
    from seqexport_dagster.delivery.assembly import control_plane_at
    from seqexport_dagster.demo.generator import Scale, generate_account
    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster.store.crypto import new_key_spec

    n = int(p.get("exports", 1))
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        keys = new_key_spec("bench")
        control, source = f"sqlite:///{tmp}/control.db", f"sqlite:///{tmp}/source.db"
        source_engine = sa.create_engine(source)
        rows = {"email_events": 0, "sms_events": 0, "custom_events": 0}
        store = control_plane_at(control, keys)
        store.migrate()
        ids = []
        for i in range(n):
            made = generate_account(
                source_engine, f"acct{i}", DAY0, DAY0 + DAY_MS, scale=Scale(subscribers=200 // n + 10)
            )
            for k in rows:
                rows[k] += made[k]
            ids.append(store.create_export(
                account_id=f"acct{i}", destination=DestinationConfig("local", f"{tmp}/bucket", prefix=f"a{i}"),
                datasets=("email_events", "sms_events", "custom_events"), frequency="1h", lag_ms=0, now_ms=DAY0,
            ).id)  # fmt: skip
        source_engine.dispose()
        store.engine.dispose()
        home = Path(tmp) / "dagster"
        home.mkdir()
        with dg.DagsterInstance.local_temp(tempdir=str(home)):
            pass
        key = day_of(DAY0).isoformat()
        config = json.dumps({"ops": {"deliveries": {"config": {"exports": ids}}}})
        env = daemon_env(home, control, source, keys)
        dagster = str(Path(sys.executable).with_name("dagster"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [dagster, "asset", "materialize", "-m", "seqexport_dagster.definitions",
             "--select", "email_events,sms_events,custom_events", "--partition", key, "--config-json", config],
            env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # The worker's own peak, read from /proc while it runs: RUSAGE_CHILDREN's ru_maxrss would
        # carry this (Dagster-importing) process's peak across fork + exec.
        peak_mb = 0.0
        while proc.poll() is None:
            peak_mb = max(peak_mb, peak_rss_mb(proc.pid))
            time.sleep(0.02)
        stdout, stderr = proc.communicate()
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise RuntimeError(f"dagster asset materialize failed:\n{out.stderr[-3000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        written = sum(1 for f in (Path(tmp) / "bucket").rglob("*.jsonl.gz"))
    events = rows["email_events"] + rows["sms_events"] + rows["custom_events"]
    return {
        "wall": wall,
        "cpu": cpu,
        "rows": events,
        "exports": n,
        "worker_peak_rss_mb": peak_mb,
        "note": f"one day of {n} export(s), {events:,} event rows, {written} parts written; {cpu:.1f} CPU-s, {wall:.1f} s wall "
        f"(process start, Dagster import, definitions, three assets, run storage); the worker's peak RSS "
        f"{peak_mb:.0f} MB, nearly all of it Dagster",
    }


def runs_simulation(p: dict[str, Any]) -> dict[str, Any]:
    """Runs launched over one simulated hour by ``p['exports']`` exports at 15 minutes (default
    1,000): the sensor ticks every 30 s; each tick's work is assumed done before the next tick.
    Old layout: one run per export with work due. New: `planner.batch` of the same work items."""
    from dataclasses import replace

    from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
    from seqexport_dagster.delivery.planner import batch, due_work, windows_due
    from seqexport_dagster.store import DatasetState, ExportRecord

    n = int(p.get("exports", 1000))
    start = DAY0 + 10 * HOUR_MS
    exports = [
        ExportRecord(
            id=f"exp_{i:06d}",
            account_id=f"acct{i % 300}",
            provider="s3",
            bucket="b",
            region=None,
            endpoint=None,
            prefix="",
            access_key_id=None,
            frequency="15m",
            lag_ms=2 * MINUTE_MS,
            status="active",
            config_version=1,
            destination_version=1,
            export_now_at=None,
            created_at=start,
            updated_at=start,
            deleted_at=None,
            datasets=tuple(DatasetState(d, start, start) for d in ("email_events", "sms_events", "custom_events")),
        )  # fmt: skip
        for i in range(n)
    ]
    old_runs = new_runs = windows = 0
    for tick in range(120):
        now = start + tick * 30_000
        items = due_work(exports, now)
        old_runs += len(items)
        new_runs += len(batch(items))
        moved = []
        for e in exports:
            states = []
            for s in e.datasets:
                due = windows_due(e, s, now, None)
                windows += len(due)
                states.append(replace(s, position_ms=due[-1].to_ms) if due else s)
            moved.append(replace(e, datasets=tuple(states)))
        exports = moved
    return {"wall": 0.0, "cpu": 0.0, "rows": 0, "exports": n, "old_runs": old_runs, "new_runs": new_runs,
            "export_windows": windows}  # fmt: skip
