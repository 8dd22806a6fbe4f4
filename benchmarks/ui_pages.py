"""The Dagster UI's asset pages over a PostgreSQL instance with days of history at 3,000 exports (issues 23, 29).

The instance holds what the code writes, bulk-copied from real rows (`benchmarks.event_log_day`):
per day, ⌈N / per-run⌉ × 96 batched runs (their event-log rows, run rows and tags, as a
daemon-launched run has them; per-run defaults to the planner's ``MAX_EXPORTS_PER_RUN``), one
``export_status`` observation per export every 6 hours (interleaved with the runs an hour at a
time, as the sensor records them between runs), and the day cells of the four datasets; the ``exports`` partitions hold the N exports. A real
``dagster-webserver`` serves it (asset specs of ``benchmarks/partition_layouts.py``, the project's
partitions), and headless Chromium (Playwright, ``executable_path``) times the median of 5 loads
after a first, each from navigation until the page is drawn (``drawn_s``: the second frame the
browser paints after the last GraphQL response of the load) and until its requests settle (``s``:
Playwright's "networkidle", 500 ms without a request, those 500 ms included): ``email_events``'s asset page, its Partitions tab, and the
``export_status`` page of one export (the asset and its check, as ``defs.export_status`` declares
them). Each page's GraphQL operations are timed too (the slowest per operation), and when the last
response arrived. While each page loads, ``pg_stat_activity`` is sampled
every 50 ms; the longest-running statements seen are then run under ``EXPLAIN ANALYZE`` and any
sequential scan of ``event_logs``/``runs``/``run_tags`` is reported.

Measured at each ``--days`` (default 1,3), so that the growth with history is measured in the same
run and 30 days can be extrapolated from it when 30 are too many to build here.

    python -m benchmarks.ui_pages [--exports 3000] [--days 1,3] [--per-run 50,100] [--status-days all,3]
        [--batch 10] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from benchmarks.event_log_day import copy_runs, copy_status, drive, per_run, vacuum
from benchmarks.partition_health import CHROMIUM, serve
from seqexport_dagster.contract.window import DAY_MS, day_of
from seqexport_dagster.defs.sensors import ROTATION, TICK_SECONDS
from seqexport_dagster.delivery.planner import MAX_EXPORTS_PER_RUN
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.processes import stop_group
from seqexport_dagster_tests.support.world import DAY0, World, postgres_database

SLOTS_PER_DAY = 96
HOURS = 24
#: Loads of each page: the first warms the webserver's caches; the median of the others is reported.
LOADS = 6
BIG = ("event_logs", "runs", "run_tags", "asset_event_tags")


def export_key(k: int) -> str:
    return f"exp_{k:016x}"


class Sampler:
    """The statements running on one database, sampled from ``pg_stat_activity`` in a thread."""

    def __init__(self, url: str, database: str) -> None:
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.database = database
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                for query, running in conn.execute(
                    sa.text(
                        "SELECT query, extract(epoch FROM clock_timestamp() - query_start) FROM pg_stat_activity"
                        " WHERE datname = :d AND state = 'active' AND pid <> pg_backend_pid()"
                        " AND query NOT LIKE '%pg_catalog%'"
                    ),
                    {"d": self.database},
                ):
                    self.seen[query] = max(self.seen.get(query, 0.0), float(running or 0.0))
                time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.engine.dispose()

    def slowest(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(self.seen.items(), key=lambda kv: -kv[1])[:n]


def explain(url: str, query: str) -> dict[str, Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            plan = [r[0] for r in conn.exec_driver_sql("EXPLAIN ANALYZE " + query)]
            conn.rollback()
    except sa.exc.SQLAlchemyError as e:
        return {"error": str(e).splitlines()[0]}
    finally:
        engine.dispose()
    scans = sorted({t for line in plan for t in BIG if f"Seq Scan on {t} " in line + " "})
    return {"ms": float(plan[-1].split(":")[1].split()[0]), "seq_scans": scans}


#: The GraphQL operations whose answers each page is drawn from (seen in its requests).
DRAWN_BY: dict[str, set[str]] = {
    "email_events asset page": {"AssetGraphLiveQuery", "AssetOverviewMetadataEventsQuery"},
    "email_events partitions tab": {"PartitionHealthQuery"},
    "export_status page of one export": {"PartitionHealthQuery", "AssetPartitionDetailQuery"},
}


def pages(port: int, export_id: str, url: str, database: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    targets = {
        "email_events asset page": "/assets/email_events",
        "email_events partitions tab": "/assets/email_events?view=partitions",
        "export_status page of one export": f"/assets/export_status?view=partitions&partition={export_id}",
    }
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            # A first page loads the UI's own scripts into the cache, as an operator's browser has them.
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            # Every document records the time of each frame it paints (epoch ms): the page is drawn
            # by the first frame after its data arrived (`drawn_at`).
            context.add_init_script(FRAME_RECORDER)
            warm = context.new_page()
            warm.goto(f"http://127.0.0.1:{port}/assets", timeout=600_000)
            warm.wait_for_load_state("networkidle", timeout=600_000)
            for name, path in targets.items():
                loads: list[float] = []
                data: list[float] = []  # navigation until the last GraphQL response has arrived
                drawn: list[float] = []  # navigation until the frame that shows that response
                operations: dict[str, float] = {}
                with Sampler(url, database) as sampler:
                    for _ in range(LOADS):  # after the first, the loads an operator clicking around sees
                        page = context.new_page()
                        timings: list[tuple[str, float, float]] = []
                        page.on("requestfinished", lambda r, t=timings: t.append(graphql_timing(r)))
                        started, epoch = time.perf_counter(), time.time()
                        page.goto(f"http://127.0.0.1:{port}{path}", timeout=600_000)
                        # "networkidle" is 500 ms without a request: the page is done 0.5 s before it.
                        # The UI may pause longer than that before its queries: the page is loaded
                        # once the operations that draw it have answered, and the network is idle.
                        page.wait_for_load_state("networkidle", timeout=600_000)
                        while not DRAWN_BY[name] <= {op for op, _, _ in timings}:
                            page.wait_for_timeout(50)
                            if time.perf_counter() - started > 600:
                                raise RuntimeError(f"{name}: no answer to {DRAWN_BY[name]} in 600 s")
                        page.wait_for_load_state("networkidle", timeout=600_000)
                        loads.append(time.perf_counter() - started)
                        last_response = max((end for op, _, end in timings if op), default=epoch)
                        data.append(last_response - epoch)
                        frames = page.evaluate("window.__frames || []")
                        drawn.append(drawn_at(frames, last_response, epoch + loads[-1]) - epoch)
                        page.close()
                        # The last load's requests: (operation, sent, answered), ms after navigation.
                        waterfall = sorted(
                            (op, round((end - epoch) * 1000 - ms), round((end - epoch) * 1000))
                            for op, ms, end in timings
                            if op
                        )
                        operations = {}
                        for op, ms, _end in timings:  # the last load's: each GraphQL operation's longest request
                            if op:
                                operations[op] = max(operations.get(op, 0.0), ms)
                slow = [
                    {"query": q[:300], "seen_running_s": s, **explain(url, q)}
                    for q, s in sampler.slowest()
                    if q.lstrip().upper().startswith("SELECT")
                ]
                out[name] = {
                    "drawn_s": statistics.median(drawn[1:]),
                    "drawn_loads_s": drawn,
                    "s": statistics.median(loads[1:]),
                    "min_s": min(loads),
                    "last_graphql_response_s": statistics.median(data[1:]),
                    "loads_s": loads,
                    "graphql_ms": dict(sorted(operations.items(), key=lambda kv: -kv[1])[:6]),
                    "waterfall_ms": sorted(waterfall, key=lambda w: w[1]),
                    "slowest_queries": slow,
                }
        finally:
            browser.close()
    return out


#: Pushes each painted frame's time (epoch ms) onto ``window.__frames``, from the document's start.
FRAME_RECORDER = """
window.__frames = [];
const recordFrame = () => {
  window.__frames.push(performance.timeOrigin + performance.now());
  requestAnimationFrame(recordFrame);
};
requestAnimationFrame(recordFrame);
"""


def drawn_at(frames_ms: list[float], last_response_s: float, settled_s: float) -> float:
    """Epoch seconds of the second frame after the last GraphQL response: the response is handled
    and rendered by then (React commits in the task that handles it, the browser paints it at the
    next frame; the second one leaves a frame of margin). ``settled_s`` (the network idle) when
    fewer than two frames were recorded after it, so that a page that did not paint is not timed
    short."""
    after = [f / 1000 for f in frames_ms if f / 1000 > last_response_s]
    return after[1] if len(after) >= 2 else settled_s


def graphql_timing(request: Any) -> tuple[str, float, float]:
    """(operation name, ms from sending the request to the end of its response, epoch seconds of
    that end) of a GraphQL request."""
    if "/graphql" not in request.url or request.method != "POST":
        return "", 0.0, 0.0
    try:
        op = str(json.loads(request.post_data or "{}").get("operationName") or "?")
    except ValueError:
        op = "?"
    t = request.timing
    return op, float(t["responseEnd"] - max(t["requestStart"], 0.0)), (t["startTime"] + t["responseEnd"]) / 1000


def build_history(
    url: str,
    template: str,
    status_id: int,
    exports: int,
    days: range,
    batch_size: int = MAX_EXPORTS_PER_RUN,
    status_from: int = 0,
) -> dict[str, int]:
    """Copies ``days`` of runs and, on the days from ``status_from`` on, the status refreshes."""
    engine = sa.create_engine(url)
    runs_per_day = SLOTS_PER_DAY * -(-exports // batch_size)
    status_per_day = exports * (DAY_MS // 1000 // TICK_SECONDS) // ROTATION
    # Interleaved an hour at a time, as the sensor records status between runs: the UI's "latest
    # observation of export_status" then finds one near the end of the event log, as it would live.
    for day in days:
        for hour in range(HOURS):
            with engine.begin() as conn:
                if day >= status_from:
                    copy_status(conn, status_id, status_per_day // HOURS, modulo=exports,
                                start=(day * HOURS + hour) * (status_per_day // HOURS))  # fmt: skip
                copy_runs(conn, template, runs_per_day // HOURS, f"-h{day}-{hour}-")
    with engine.connect() as conn:
        counts = {t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in BIG}
    engine.dispose()
    vacuum(url)
    return counts


def measure(
    exports: int, days_list: list[int], batch: int, progress: Any, batch_size: int, status_days: int | None = None
) -> list[dict[str, Any]]:
    """``status_days``: the status refreshes of only the last that many days of the longest history
    (a shorter retention of them than the runs' 30 days); all of them when ``None``."""
    status_from = 0 if status_days is None else max(0, max(days_list) - status_days)
    keys = new_key_spec("bench")
    results = []
    with tempfile.TemporaryDirectory() as tmp, postgres_database() as dagster_url:
        root = Path(tmp)
        world = World.in_files(root, DAY0, keys)
        database = dagster_url.rsplit("/", 1)[1]
        home = root / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text(
            f"storage:\n  postgres:\n    postgres_url: {dagster_url}\ntelemetry:\n  enabled: false\n"
        )
        try:
            for i in range(batch):
                generate_account(world.source_engine, f"acct{i}", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(subscribers=20))
            with dg.DagsterInstance.from_config(str(home)) as instance:
                run_ids = drive(world, instance, batch, 2, keys)
                instance.add_dynamic_partitions("exports", [export_key(k) for k in range(exports)])
            engine = sa.create_engine(dagster_url)
            runs = [r for r in per_run(engine, run_ids) if r["run_id"] != run_ids[0]]
            template = sorted(runs, key=lambda r: r["bytes"])[len(runs) // 2]["run_id"]
            with engine.connect() as conn:
                status_id = int(
                    conn.execute(
                        sa.text(
                            "SELECT id FROM event_logs WHERE run_id = '' AND dagster_event_type = 'ASSET_OBSERVATION'"
                            " AND asset_key LIKE '%export_status%' ORDER BY id DESC LIMIT 1"
                        )
                    ).scalar_one()
                )
            engine.dispose()
            built = 0
            for days in days_list:
                started = time.perf_counter()
                counts = build_history(
                    dagster_url, template, status_id, exports, range(built, days), batch_size, status_from
                )
                with dg.DagsterInstance.from_config(str(home)) as instance:  # the day cells of the new days
                    for d in range(built, days):
                        for dataset in ("email_events", "sms_events", "custom_events", "subscribers"):
                            instance.report_runless_asset_event(
                                dg.AssetMaterialization(dataset, partition=(day_of(DAY0) - dt_days(d)).isoformat())
                            )
                built = days
                progress(f"{days} day(s) of history at {exports:,} exports: {counts} in "
                         f"{time.perf_counter() - started:.0f} s")  # fmt: skip
                proc, port = serve(home, "new")
                try:
                    timed = pages(port, export_key(7), dagster_url, database)
                finally:
                    stop_group(proc)
                progress(
                    json.dumps(
                        {
                            k: [
                                round(v["drawn_s"], 2),
                                round(v["s"], 2),
                                round(v["last_graphql_response_s"], 2),
                                v["graphql_ms"],
                                v["slowest_queries"][:1],
                            ]
                            for k, v in timed.items()
                        }
                    )
                )
                results.append({"exports": exports, "exports_per_run": batch_size, "days": days,
                                "status_days": status_days, "rows": counts, "pages": timed,
                                "load": " ".join(f"{v:.1f}" for v in os.getloadavg())})  # fmt: skip
        finally:
            world.dispose()
    return results


def dt_days(n: int) -> Any:
    import datetime as dt

    return dt.timedelta(days=n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=3000)
    parser.add_argument("--days", default="1,3", help="history sizes, ascending (each builds on the last)")
    parser.add_argument("--batch", type=int, default=10, help="exports in the real runs the rows are copied from")
    parser.add_argument(
        "--per-run",
        default=str(MAX_EXPORTS_PER_RUN),
        help="exports a run carries, comma-separated: 50,100 measures the 50-a-run design (before) and the"
        " planner's (after) in the same run",
    )
    parser.add_argument(
        "--status-days",
        default="all",
        help="days of export_status refreshes kept, comma-separated ('all' or a number each): 'all,3' measures"
        " every day's refreshes and only the last 3 days' in the same run, each on a database of its own",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    results = []
    days = [int(d) for d in args.days.split(",")]
    for size in (int(n) for n in args.per_run.split(",")):  # each on a database of its own
        for kept in args.status_days.split(","):
            status_days = None if kept == "all" else int(kept)
            progress(f"exports per run: {size}; days of status refreshes: {kept}")
            results += measure(args.exports, days, args.batch, progress, size, status_days)
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
