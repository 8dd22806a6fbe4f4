"""Issue 44: what a Delta table costs, per window and after a year.

1. Commit cost per window, through the real runner: a day of 15-minute windows of one dataset
   (``custom_events``, Parquet) into a local folder, once without a table and once with
   ``--table delta``, on the same rows; CPU-s per window of each, their difference (the commit:
   its control-plane transaction, its body, its create-only PUT), and the log's bytes and objects
   per window.
2. The log after a simulated year of 15-minute windows (35,040 commits, one part with rows each, the
   bodies `delta_log.commit_body` writes), with checkpoints every 100 and 1,000 versions and with
   none: its size and object count, the CPU-s to write the checkpoints, and a reader's time to open
   the table (delta-rs ``DeltaTable(...)`` and DuckDB's ``delta`` extension counting rows; neither
   has ``_last_checkpoint``, both list the log). Every data file is a real 3-row Parquet file.

``python -m benchmarks.delta_log [--days 365]``; writes ``benchmarks/RESULTS_delta_log.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS, iso_ms
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.delivery.parquet_writer import arrow_schema
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster_tests.support import duckdb_httpfs
from seqexport_dagster_tests.support.world import DAY0, sqlite_world

OUT = Path(__file__).with_name("RESULTS_delta_log.json")
WINDOW_MS = 15 * MINUTE_MS
DATASET = "custom_events"
DAY = dt.date(2026, 9, 30)


def _cpu() -> float:
    return time.process_time()


def runner_day(tmp: Path, *, table: bool) -> dict[str, Any]:
    root = tmp / ("table" if table else "files")
    root.mkdir()
    with sqlite_world(root) as world:
        scale = Scale(subscribers=200, email_sends_per_hour=0, sms_sends_per_hour=0, custom_per_hour=400)
        generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=scale)
        export = world.local_export(datasets=(DATASET,), file_format="parquet", frequency="15m")
        if table:
            world.store.set_table(export.id, "delta", world.clock())
        runner = world.runner()
        began = _cpu()
        windows = 0
        for end in range(DAY0 + WINDOW_MS, DAY0 + DAY_MS + 1, WINDOW_MS):
            world.clock.now_ms = end + 120_000
            windows += len(runner.run_day(export.id, DATASET, DAY).windows)
        cpu = _cpu() - began
        log = list((root / "bucket" / DATASET / "_delta_log").glob("*")) if table else []
        return {
            "windows": windows,
            "cpu_s": cpu,
            "cpu_s_per_window": cpu / max(windows, 1),
            "log_objects": len(log),
            "log_bytes": sum(p.stat().st_size for p in log),
        }


def _small_parquet() -> bytes:
    ds = DATASETS[DATASET]
    cols: dict[str, Any] = {}
    for f in ds.fields:
        if f.type == "timestamp":
            cols[f.name] = pa.array([DAY0 + i for i in range(3)], pa.timestamp("ms", tz="UTC"))
        elif f.nullable:
            cols[f.name] = pa.nulls(3, pa.string())
        else:
            cols[f.name] = pa.array(["x"] * 3)
    sink = io.BytesIO()
    pq.write_table(pa.table(cols, schema=arrow_schema(ds)), sink, compression="zstd")
    return sink.getvalue()


def _open_times(root: Path) -> dict[str, Any]:
    from deltalake import DeltaTable

    began = time.perf_counter()
    table = DeltaTable(str(root))
    live = len(table.file_uris())
    delta_rs_open = time.perf_counter() - began
    quiet = ["SET enable_progress_bar = false"]
    began = time.perf_counter()
    duckdb_httpfs.run(quiet, ["SELECT 1"], extensions=("delta",))
    baseline = time.perf_counter() - began
    began = time.perf_counter()
    out = duckdb_httpfs.run(quiet, [f"SELECT count(*) FROM delta_scan('{root}')"], extensions=("delta",))
    duckdb_count = time.perf_counter() - began - baseline
    return {
        "delta_rs_open_s": delta_rs_open,
        "delta_rs_files": live,
        # Less a subprocess that only loads DuckDB and the extension; counting reads every footer.
        "duckdb_count_s": duckdb_count,
        "duckdb_rows": int(out["results"][0][0][0]),
    }


def year_log(tmp: Path, days: int) -> list[dict[str, Any]]:
    """One year of commits and data files; checkpoints every 100 versions written aside, then the
    table is opened with none, with those of every 1,000 versions, and with all of them."""
    root = tmp / "year" / DATASET
    aside = tmp / "checkpoints"
    (root / "_delta_log").mkdir(parents=True)
    aside.mkdir()
    part = _small_parquet()
    files: list[delta_log.TableFile] = []
    commit_cpu = checkpoint_cpu = 0.0
    n = days * DAY_MS // WINDOW_MS
    for v in range(n):
        start = DAY0 + v * WINDOW_MS
        date = iso_ms(start)[:10]
        path = f"date={date}/{DATASET}-{start}-{start + WINDOW_MS}-0000.parquet"
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).write_bytes(part)
        f = delta_log.TableFile(path, date, len(part), 3, start, start + WINDOW_MS)
        files.append(f)
        began = _cpu()
        body = delta_log.commit_body(
            version=v, dataset=DATASET, table="t", app_id="exp_bench", txn=v + 1, adds=[f], removes=[], now_ms=start
        )
        commit_cpu += _cpu() - began
        (root / "_delta_log" / f"{v:020d}.json").write_bytes(body)
        if v and v % 100 == 0:
            began = _cpu()
            cp = delta_log.checkpoint_body(
                dataset=DATASET, table="t", app_id="exp_bench", txn=v + 1, txn_ms=start, files=files, file_ms=start
            )
            checkpoint_cpu += _cpu() - began
            (aside / f"{v:020d}.checkpoint.parquet").write_bytes(cp)
    json_bytes = sum(p.stat().st_size for p in (root / "_delta_log").iterdir())
    out = []
    for interval in (0, 1000, 100):
        chosen = [p for p in aside.iterdir() if interval and int(p.name[:20]) % interval == 0]
        for p in chosen:
            shutil.copy(p, root / "_delta_log" / p.name)
        cp_bytes = sum(p.stat().st_size for p in chosen)
        out.append(
            {
                "interval": interval,
                "commits": n,
                "log_objects": n + len(chosen),
                "log_bytes": json_bytes + cp_bytes,
                "json_bytes": json_bytes,
                "checkpoint_bytes": cp_bytes,
                "largest_checkpoint_bytes": max((p.stat().st_size for p in chosen), default=0),
                "commit_body_cpu_s_per_commit": commit_cpu / n,
                "checkpoint_cpu_s_total": checkpoint_cpu * len(chosen) / max(n // 100, 1),
                **_open_times(root),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-delta-"))
    try:
        files = runner_day(tmp, table=False)
        tabled = runner_day(tmp, table=True)
        result: dict[str, Any] = {
            "runner_day_files_only": files,
            "runner_day_with_table": tabled,
            "commit_cpu_s_per_window": tabled["cpu_s_per_window"] - files["cpu_s_per_window"],
            "commit_bytes_per_window": tabled["log_bytes"] / max(tabled["windows"], 1),
            "log_objects_per_window": tabled["log_objects"] / max(tabled["windows"], 1),
            "year": year_log(tmp, args.days),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
