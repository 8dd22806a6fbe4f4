"""The Dagster UI's cost of the dataset assets' partitioning: export × date (old) beside UTC day (new).

For each N, two instances of the same shape as issue 14's measurements: N exports, export *i*
created on day *i*·698/N of a two-year range, every day since materialized. Old layout: one
``email_events`` asset partitioned export × date (a cell per export-day). New layout: the same
asset partitioned by day (a cell per day, green once every export has it), plus ``export_status``
with one partition per export. Both are served by a real ``dagster-webserver`` (asset specs of
``benchmarks/partition_layouts.py``; the query only depends on the partitioning and the events).

Measured per instance, in this one run: the UI's own ``PartitionHealthQuery`` (its text copied
from the webserver's bundle) cold (first request after start) and warm (median of 3), the response
size, the webserver's RSS after the queries, and the same query after one more export is added.
And the partitions tab rendered in headless Chromium (Debian's ``chromium``, driven by Playwright
through ``executable_path``), after the warm queries.

    .venv/bin/python -m benchmarks.partition_health [--sizes 300,1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import start_group, stop_group

ROOT = Path(__file__).resolve().parent.parent
DAYS = 730
SPAN = 698
QUERY = """query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
        ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
              ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
            }
          }
        }
      }
    }
  }
}"""


def _storage(home: Path) -> None:
    (home / "dagster.yaml").write_text(
        "event_log_storage:\n  module: dagster.core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage\n"
        f"  config:\n    base_dir: {home / 'history'}\ntelemetry:\n  enabled: false\n"
    )


def populate(home: Path, layout: str, n: int) -> int:
    """Write the materializations of the shape above; returns how many."""
    import dagster as dg

    from benchmarks.partition_layouts import first_day

    start = first_day()
    ids = [f"exp_{i:06d}" for i in range(n)]
    created = {e: i * SPAN // n for i, e in enumerate(ids)}
    events: list[dg.AssetMaterialization] = []
    if layout == "old":
        for export_id, first in created.items():
            for d in range(first, DAYS):
                key = dg.MultiPartitionKey({"date": (start + _days(d)).isoformat(), "export": export_id})
                events.append(dg.AssetMaterialization("email_events", partition=key))
    else:
        events += [
            dg.AssetMaterialization("email_events", partition=(start + _days(d)).isoformat()) for d in range(DAYS)
        ]
        events += [dg.AssetMaterialization("export_status", partition=e) for e in ids]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("exports", ids)
        bulk_store(instance, events)
    return len(events)


def bulk_store(instance: Any, materializations: list[Any]) -> None:
    """What ``report_runless_asset_event`` stores, in one transaction per 20,000 events.

    Benchmark-only use of Dagster internals: the public call commits each event on its own
    (about 90 events/s here), which would take hours for the old layout at 3,000 exports. The
    rows written are the same: the event, its partition tags and the asset's latest record.
    """
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry

    storage = instance.event_log_storage
    for chunk in range(0, len(materializations), 20_000):
        entries = [
            EventLogEntry(
                error_info=None,
                level=20,
                user_message="",
                run_id="",
                timestamp=time.time(),
                dagster_event=DagsterEvent(
                    DagsterEventType.ASSET_MATERIALIZATION.value,
                    job_name="__ASSET_JOB",
                    event_specific_data=StepMaterializationData(m),
                ),
            )  # fmt: skip
            for m in materializations[chunk : chunk + 20_000]
        ]
        with storage.run_connection("") as conn:
            ids = [conn.execute(storage.prepare_insert_event(e)).inserted_primary_key[0] for e in entries]
        with storage.index_transaction() as conn:
            storage._store_asset_event_tags(conn, entries, ids)
            last: dict[Any, tuple[Any, int]] = {}
            for entry, event_id in zip(entries, ids, strict=True):
                last[entry.dagster_event.asset_key] = (entry, event_id)
            for entry, event_id in last.values():
                storage._store_asset_event(conn, entry, event_id)


def _days(d: int) -> Any:
    import datetime as dt

    return dt.timedelta(days=d)


def add_export(home: Path, layout: str, n: int) -> None:
    import dagster as dg

    from benchmarks.partition_layouts import first_day

    export_id = f"exp_new{n:06d}"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("exports", [export_id])
        today = (first_day() + _days(DAYS - 1)).isoformat()
        if layout == "old":
            key = dg.MultiPartitionKey({"date": today, "export": export_id})
            instance.report_runless_asset_event(dg.AssetMaterialization("email_events", partition=key))
        else:
            instance.report_runless_asset_event(dg.AssetMaterialization("export_status", partition=export_id))


def query(port: int) -> tuple[float, int]:
    body = json.dumps({"query": QUERY, "variables": {"assetKey": {"path": ["email_events"]}}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        data = response.read()
    elapsed = time.perf_counter() - started
    if b'"errors"' in data[:200]:
        raise RuntimeError(data[:2000].decode())
    return elapsed, len(data)


def serve(home: Path, layout: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SEQEXPORT_BENCH_LAYOUT": layout, "PYTHONPATH": str(ROOT)}
    binary = shutil.which("dagster-webserver", path=str(Path(sys.executable).parent)) or "dagster-webserver"
    proc = start_group(
        [binary, "-m", "benchmarks.partition_layouts", "-h", "127.0.0.1", "-p", str(port)],
        log=home / "webserver.log", cwd=ROOT, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((home / "webserver.log").read_text()[-3000:]) from None
            time.sleep(0.5)
    stop_group(proc)
    raise RuntimeError("dagster-webserver did not start within 180 s")


#: Debian's chromium (``apt-get install chromium``); the wrapper script in /usr/bin sets flags
#: Playwright does not need, so the binary itself is launched.
CHROMIUM = "/usr/lib/chromium/chromium"


def render_partitions_tab(port: int) -> float | None:
    """Seconds from navigating to ``email_events``'s Partitions tab in headless Chromium until the
    last day's key is on screen and the page's requests have settled; ``None`` without Playwright."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    from benchmarks.partition_layouts import first_day

    last = (first_day() + _days(DAYS - 1)).isoformat()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            started = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/assets/email_events?view=partitions", timeout=600_000)
            page.get_by_text(last).first.wait_for(timeout=600_000)
            page.wait_for_load_state("networkidle", timeout=600_000)
            return time.perf_counter() - started
        finally:
            browser.close()


def group_rss_mb(pid: int) -> float:
    """RSS of the webserver and its code server (the process group)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) == pid:
                with (proc / "status").open() as handle:
                    total += next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) / 1024
        except (OSError, ValueError, StopIteration):
            continue
    return total


def measure(n: int, layout: str, tmp: Path) -> dict[str, Any]:
    home = tmp / f"{layout}_{n}"
    home.mkdir()
    _storage(home)
    t0 = time.perf_counter()
    events = populate(home, layout, n)
    populate_s = time.perf_counter() - t0
    proc, port = serve(home, layout)
    try:
        cold, size = query(port)
        warm = statistics.median(query(port)[0] for _ in range(3))
        render = render_partitions_tab(port)
        rss = group_rss_mb(proc.pid)
        add_export(home, layout, n)
        after_new, _ = query(port)
    finally:
        stop_group(proc)
    return {"n": n, "layout": layout, "events": events, "populate_s": populate_s, "cold_s": cold, "warm_s": warm,
            "bytes": size, "rss_mb": rss, "after_new_export_s": after_new, "render_s": render}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = []
    # On tmpfs when there is one: the instances are written event by event (millions of fsyncs).
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="seqexport-partitions-", dir=scratch) as tmp_name:
        for n in [int(s) for s in args.sizes.split(",")]:
            pair = {}
            for layout in ("old", "new"):
                r = measure(n, layout, Path(tmp_name))
                pair[layout] = r
                results.append(r)
                print(f"N={n:>5} {layout:3}: {r['events']:>9,} events (written in {r['populate_s']:.0f} s); "
                      f"PartitionHealthQuery cold {r['cold_s']:.3f} s, warm {r['warm_s']:.3f} s, "
                      f"partitions tab in Chromium {r['render_s'] or 0:.2f} s, "
                      f"{r['bytes'] / 1e6:.2f} MB; after one new export {r['after_new_export_s']:.3f} s; "
                      f"webserver + code server RSS {r['rss_mb']:.0f} MB", flush=True)  # fmt: skip
            old, new = pair["old"], pair["new"]
            print(f"N={n:>5} old/new: warm {old['warm_s'] / new['warm_s']:.1f}x, cold {old['cold_s'] / new['cold_s']:.1f}x, "
                  f"after a new export {old['after_new_export_s'] / new['after_new_export_s']:.1f}x, "
                  f"response {old['bytes'] / new['bytes']:.0f}x, RSS {old['rss_mb'] / new['rss_mb']:.2f}x, "
                  f"partitions tab {(old['render_s'] or 0) / (new['render_s'] or 1):.1f}x", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
