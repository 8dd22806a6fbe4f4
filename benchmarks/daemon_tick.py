"""The daemon's tick at N exports on PostgreSQL, before and after the bounded day cells (issues 23, 29).

What one tick of the sensor daemon costs, measured as the daemon does it (dagster 1.13's
``_evaluate_sensor``): the scheduler sensor evaluated with its resources, then every asset event of
its `SensorResult` stored one by one with ``instance.report_runless_asset_event`` and its partition
requests applied, into a PostgreSQL Dagster instance. Wall time and the process's CPU time (the
sensor and the storing, which the daemon splits between its code server and itself). The runs a
tick requests are counted, not created (``benchmarks/launch.py`` measures the daemon launching them).

The control plane is PostgreSQL with rows in the exact shapes the runner writes
(`support.metadata_rows`): a template export delivered for a day of 15-minute windows by the real
runner, copied to N exports, so yesterday is complete for every one of them. Ticks measured:
1. *day completes*: the cursor says yesterday is not green yet; the ticks until every dataset's
   cell is materialized (before: one tick summing four whole days; after: spans over several ticks);
2. *steady*: nothing due, the status rotation only (median of ``--ticks``);
3. *slot*: a 15-minute slot falls due for every export (N/100 run requests): once *cold*, with
   nothing the sensor keeps between ticks (every export's record rebuilt, the worst tick), then
   three more times as ticks in one process see it (median).
"Before" is the code at ``--before-rev`` (exported with ``git archive``), "after" this tree, each in
its own process against the same control plane and a fresh Dagster database, in one run. The
day-totals query of each is also run alone under ``EXPLAIN ANALYZE`` over yesterday.

    python -m benchmarks.daemon_tick [--exports 300,1000] [--ticks 5] [--before-rev 446eeff] [--out f.json]

``SEQEXPORT_TICK_PROFILE=path`` also writes a cProfile of each tree's cold slot tick to
``path.<tree folder>`` (read it with ``python -m pstats``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.revisions import export_revision

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REV = "446eeff"  # main before issue 29's lean fleet read (479d882: before the day cells)
SLOT_MS = 15 * 60_000


def child(p: dict[str, Any]) -> dict[str, Any]:
    """One code tree's ticks (this function runs under that tree's ``seqexport_dagster``)."""
    import dagster as dg

    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.definitions import exporter_resources
    from seqexport_dagster.defs.resources import ControlPlaneResource, FixedClock, OperatorResource, SourceResource
    from seqexport_dagster.defs.sensors import Cursor
    from seqexport_dagster.demo.ticker import evaluate_sensor

    now0, yesterday, before_that = int(p["now_ms"]), p["yesterday"], p["day_before"]
    overrides = {"storage": {"postgres": {"postgres_url": p["dagster_url"]}}}

    def resources(now: int) -> dict[str, Any]:
        return exporter_resources(
            ControlPlaneResource(database_url=p["control_url"], secret_keys=p["keys"]),
            SourceResource(source_url=p["source_url"]),
            OperatorResource(allow_local="1"),
            FixedClock(at_ms=now),
        )

    gc_time = GcTime()
    gc.callbacks.append(gc_time)
    with tempfile.TemporaryDirectory() as home, dg.instance_for_test(overrides=overrides, temp_dir=home) as instance:

        def tick(now: int, cursor: str | None) -> dict[str, Any]:
            res = resources(now)
            w0, c0, g0 = time.perf_counter(), time.process_time(), gc_time.seconds
            result = evaluate_sensor(instance, res, cursor)
            w1, c1 = time.perf_counter(), time.process_time()
            # What the daemon does with the result (dagster/_daemon/sensor.py, _evaluate_sensor).
            for event in result.asset_events:
                instance.report_runless_asset_event(event)
            for change in result.dynamic_partitions_requests or []:
                if isinstance(change, dg.AddDynamicPartitionsRequest):
                    instance.add_dynamic_partitions(change.partitions_def_name, list(change.partition_keys))
            w2, c2 = time.perf_counter(), time.process_time()
            kinds: dict[str, int] = {}
            for event in result.asset_events:
                kinds[type(event).__name__] = kinds.get(type(event).__name__, 0) + 1
            return {
                "wall_s": w2 - w0, "cpu_s": c2 - c0, "sensor_wall_s": w1 - w0, "sensor_cpu_s": c1 - c0,
                "store_wall_s": w2 - w1, "store_cpu_s": c2 - c1, "gc_s": gc_time.seconds - g0, "events": kinds,
                "runs": len(result.run_requests or []), "cursor": result.cursor,
            }  # fmt: skip

        # The code server settles its heap once the location has loaded (trees that do).
        settle = getattr(importlib.import_module("seqexport_dagster.definitions"), "settle_heap", None)
        if settle is not None:
            settle()
        first = tick(now0, None)  # registers the exports as partitions: not measured
        cursor = Cursor.parse(first["cursor"])
        cursor.through = {d: before_that for d in DATASETS}
        if hasattr(cursor, "pending"):
            cursor.pending = {}
        text: str | None = cursor.dump()
        # Every tick at 00:03:30-00:05:30, before the first slot is due (00:17): the day ticks and
        # the steady ones do the same work apart from the day cells, whatever their number.
        day_ticks = []
        while len(day_ticks) < 200:
            t = tick(now0 + 30_000, text)
            day_ticks.append(t)
            text = t["cursor"]
            if all(Cursor.parse(text).through.get(d) == yesterday for d in DATASETS):
                break
        steady = []
        for k in range(int(p["ticks"])):
            t = tick(now0 + 60_000 + k * 30_000, text)
            steady.append(t)
            text = t["cursor"]
        slot_now = now0 - 3 * 60_000 + SLOT_MS + 2 * 60_000 + 30_000  # 00:17:30, the first slot due
        # Cold: nothing kept from earlier ticks (code that keeps the fleet's records between ticks,
        # `fleet.fleet_exports`, rebuilds every one: the worst tick, as after every export's position
        # moved). Then the same slot twice more, as the daemon's ticks in one process see it.
        forget_fleet()
        profile_to = os.environ.get("SEQEXPORT_TICK_PROFILE")  # a cProfile of the cold tick, for its cost's breakdown
        profiler = cProfile.Profile() if profile_to else None
        if profiler is not None:
            profiler.enable()
        slot_cold = [tick(slot_now, text)]
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile_to}.{Path.cwd().name}")
        slot = [tick(slot_now, text) for _ in range(3)]
    for t in (*day_ticks, *steady, *slot_cold, *slot):
        t.pop("cursor")
    return {"register": {k: v for k, v in first.items() if k != "cursor"}, "day": day_ticks, "steady": steady,
            "slot_cold": slot_cold, "slot": slot}  # fmt: skip


class GcTime:
    """A `gc.callbacks` entry adding up the wall time of the garbage collector's passes."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began


def forget_fleet() -> None:
    """Drop the records the sensor keeps between ticks, in code that keeps any (not in the before code)."""
    from seqexport_dagster.store import fleet

    built = getattr(fleet, "_built", None)
    if built is not None:
        built.clear()


def summary(ticks: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return statistics.median(t[key] for t in ticks)

    return {
        "ticks": len(ticks),
        "wall_s": med("wall_s"), "cpu_s": med("cpu_s"), "max_wall_s": max(t["wall_s"] for t in ticks),
        "max_cpu_s": max(t["cpu_s"] for t in ticks), "store_wall_s": med("store_wall_s"),
        "gc_s": med("gc_s") if all("gc_s" in t for t in ticks) else None,
        "events": max(sum(t["events"].values()) for t in ticks), "runs": max(t["runs"] for t in ticks),
    }  # fmt: skip


def explain_day_totals(control_url: str, yesterday: str) -> dict[str, float]:
    """Execution time of yesterday's email_events totals: the old shape (max(id) + IN) and the new."""
    import datetime as dt

    import sqlalchemy as sa

    from seqexport_dagster.contract.window import DAY_MS, day_start_ms
    from seqexport_dagster.store.fleet import _latest_committed

    start = day_start_ms(dt.date.fromisoformat(yesterday))
    old = (
        "SELECT count(DISTINCT export_id), count(*), coalesce(sum(rows), 0), coalesce(sum(parts), 0),"
        " coalesce(sum(bytes), 0) FROM windows WHERE id IN (SELECT max(id) FROM windows WHERE dataset ="
        " 'email_events' AND from_ms >= {lo} AND from_ms < {hi} AND status = 'committed'"
        " GROUP BY export_id, from_ms, to_ms)"
    )
    engine = sa.create_engine(control_url)
    out: dict[str, float] = {}
    try:
        s = _latest_committed("email_events", start, start + DAY_MS)
        new = sa.select(sa.func.count(sa.distinct(s.c.export_id)), sa.func.count(), sa.func.sum(s.c.rows)).where(
            s.c.rn == 1
        )
        new_sql = str(new.compile(engine, compile_kwargs={"literal_binds": True}))
        with engine.connect() as conn:
            for name, sql in (("before", old.format(lo=start, hi=start + DAY_MS)), ("after", new_sql)):
                plan = [r[0] for r in conn.execute(sa.text("EXPLAIN (ANALYZE, FORMAT TEXT) " + sql))]
                out[f"{name}_day_ms"] = float(plan[-1].split(":")[1].split()[0])
                out[f"{name}_seq_scan"] = float(any("Seq Scan on windows" in line for line in plan))
    finally:
        engine.dispose()
    return out


def measure(n: int, ticks: int, before_code: Path | None, progress: Any) -> dict[str, Any]:
    import datetime as dt

    from seqexport_dagster.contract.window import DAY_MS, day_of
    from seqexport_dagster.store.crypto import SecretBox, new_key_spec
    from seqexport_dagster_tests.support.metadata_rows import deliver_template, replicate
    from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database

    keys = new_key_spec("bench")
    with tempfile.TemporaryDirectory() as tmp, postgres_database() as control, postgres_database() as source:
        world = World(Path(tmp), control, source, Clock(DAY0), box=SecretBox.parse(keys))
        try:
            started = time.perf_counter()
            template = deliver_template(world, 96)
            now = world.clock()
            for i in range(1, n, 250):
                replicate(world.control_engine, template, list(range(i, min(n, i + 250))), range(1), now)
            with world.control_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")
            progress(f"{n:,} exports with a delivered day built in {time.perf_counter() - started:.0f} s")
            yesterday = day_of(now - DAY_MS)
            params = {"control_url": control, "source_url": source, "keys": keys, "now_ms": now, "ticks": ticks,
                      "yesterday": yesterday.isoformat(),
                      "day_before": (yesterday - dt.timedelta(days=1)).isoformat()}  # fmt: skip
            out: dict[str, Any] = {"exports": n, "explain": explain_day_totals(control, yesterday.isoformat())}
            trees = (("before", before_code), ("after", ROOT)) if before_code is not None else (("after", ROOT),)
            for name, code in trees:
                with postgres_database() as dagster_url:
                    # cwd is the code's tree: ``-m`` puts it first on sys.path, before the editable install.
                    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
                    proc = subprocess.run(
                        [sys.executable, "-m", "benchmarks.daemon_tick", "--child",
                         json.dumps(params | {"dagster_url": dagster_url})],
                        env=env, cwd=code, capture_output=True, text=True,
                    )  # fmt: skip
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} ticks failed:\n{proc.stderr[-4000:]}")
                raw = json.loads(proc.stdout.strip().splitlines()[-1])
                out[name] = {"day": summary(raw["day"]), "steady": summary(raw["steady"]), "slot": summary(raw["slot"]),
                             "slot_cold": summary(raw["slot_cold"]), "raw": raw}  # fmt: skip
                shown = ("day", "steady", "slot_cold", "slot")
                progress(f"{n:,} exports, {name}: " + json.dumps({k: out[name][k] for k in shown}))
            out["load"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
            return out
        finally:
            world.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", default=os.environ.get("SEQEXPORT_BENCH_TICK_EXPORTS", "300,1000"))
    parser.add_argument("--ticks", type=int, default=5, help="steady ticks measured (median)")
    parser.add_argument("--before-rev", default=BEFORE_REV, help="git revision of the 'before' code ('' for none)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        before = export_revision(args.before_rev, Path(tmp)) if args.before_rev else None
        for n in (int(x) for x in args.exports.split(",")):
            results.append(measure(n, args.ticks, before, progress))
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
