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
from seqexport_dagster_tests.processes import daemon_env

_FREQUENCIES = ("15m", "1h", "6h", "24h")


def tick(p: dict[str, Any]) -> dict[str, Any]:
    """The scheduler sensor's full evaluation (``build_sensor_context`` + resources + control-plane
    queries + partition and in-flight-run queries + policy + run requests, the same path as
    ``benchmarks/sensor_tick.py``) over ``p['exports']`` exports of four datasets each, against a
    real Dagster instance on SQLite. The first tick registers the exports as partitions (not
    timed); the median of the next 5 is reported, and the pure policy part (list_exports +
    schedule.due_work) separately."""
    import dagster as dg  # noqa: PLC0415

    from seqexport_dagster.definitions import exporter_resources  # noqa: PLC0415
    from seqexport_dagster.defs.inline import evaluate_sensor  # noqa: PLC0415
    from seqexport_dagster.defs.resources import (  # noqa: PLC0415
        ControlPlaneResource,
        FixedClock,
        OperatorResource,
        SourceResource,
    )
    from seqexport_dagster.schedule import due_work  # noqa: PLC0415
    from seqexport_dagster.store.crypto import SecretBox, new_key_spec  # noqa: PLC0415
    from seqexport_dagster.store.database import create_engine  # noqa: PLC0415
    from seqexport_dagster.store.store import ControlPlane  # noqa: PLC0415
    from seqexport_dagster.window import HOUR_MS  # noqa: PLC0415

    n = int(p["exports"])
    now = DAY0 + 26 * HOUR_MS
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        spec, url = new_key_spec("bench"), f"sqlite:///{tmp}/control.db"
        store = ControlPlane(create_engine(url), SecretBox.parse(spec))
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
            ticks, policy, requests = [], [], 0
            for _ in range(5):
                t0 = time.perf_counter()
                result = evaluate_sensor(instance, resources)
                ticks.append(time.perf_counter() - t0)
                requests = len(result.run_requests or [])
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
        "via": "seqexport_dagster.defs.inline.evaluate_sensor (as benchmarks/sensor_tick.py)",
    }


def _bulk_exports(store: Any, n: int, created: int) -> None:
    """``n`` exports of four datasets with the frequencies mixed: one made by ``create_export``
    (sealed secret and all), the others copied from it in one transaction (3,000 separate
    create_export transactions would take minutes on SQLite)."""
    import sqlalchemy as sa  # noqa: PLC0415

    from seqexport_dagster.destination.base import DestinationConfig  # noqa: PLC0415
    from seqexport_dagster.store.tables import export_datasets, exports  # noqa: PLC0415

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
    """CPU of one run worker: ``dagster asset materialize`` of one export-day partition (three event
    datasets, a small account) in a fresh process, as the run launcher would start it. Includes the
    interpreter, importing Dagster and loading the definitions, which dominate for small days."""
    import dagster as dg  # noqa: PLC0415
    import sqlalchemy as sa  # noqa: PLC0415

    from seqexport_dagster.defs.partitions import exports_partitions, partition_key  # noqa: PLC0415
    from seqexport_dagster.destination.base import DestinationConfig  # noqa: PLC0415
    from seqexport_dagster.source.generator import Scale, generate_account  # noqa: PLC0415
    from seqexport_dagster.store.crypto import SecretBox, new_key_spec  # noqa: PLC0415
    from seqexport_dagster.store.database import create_engine  # noqa: PLC0415
    from seqexport_dagster.store.store import ControlPlane  # noqa: PLC0415
    from seqexport_dagster.window import DAY_MS, day_of  # noqa: PLC0415

    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        keys = new_key_spec("bench")
        control, source = f"sqlite:///{tmp}/control.db", f"sqlite:///{tmp}/source.db"
        source_engine = sa.create_engine(source)
        rows = generate_account(source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(subscribers=200))
        source_engine.dispose()
        store = ControlPlane(create_engine(control), SecretBox.parse(keys))
        store.migrate()
        export = store.create_export(
            account_id="acme", destination=DestinationConfig("local", f"{tmp}/bucket"),
            datasets=("email_events", "sms_events", "custom_events"), frequency="1h", lag_ms=0, now_ms=DAY0,
        )  # fmt: skip
        store.engine.dispose()
        home = Path(tmp) / "dagster"
        home.mkdir()
        with dg.DagsterInstance.local_temp(tempdir=str(home)) as instance:
            instance.add_dynamic_partitions(exports_partitions.name or "exports", [export.id])
        key = str(partition_key(export.id, day_of(DAY0).isoformat()))
        env = daemon_env(home, control, source, keys)
        dagster = str(Path(sys.executable).with_name("dagster"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [dagster, "asset", "materialize", "-m", "seqexport_dagster.definitions",
             "--select", "email_events,sms_events,custom_events", "--partition", key],
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
        "worker_peak_rss_mb": peak_mb,
        "note": f"one export-day of {events:,} event rows, {written} parts written; {cpu:.1f} CPU-s, {wall:.1f} s wall "
        f"(process start, Dagster import, definitions, three assets, run storage); the worker's peak RSS "
        f"{peak_mb:.0f} MB, nearly all of it Dagster",
    }
