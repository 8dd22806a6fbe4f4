"""The benchmark runner: ``python -m benchmarks [--rows N]``. See ``benchmarks/README`` in RESULTS.md.

Every figure comes from this one run, on the same generated rows. Throughput "per core" is rows per
CPU-second of the measuring process (wall-clock rows/s are shown too, but on a shared machine they
depend on the neighbours; the load average is recorded with the results).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import data
from benchmarks.child import CONTROL_TEMPLATE
from benchmarks.peers import APSW_PEER, peer_python
from benchmarks.profile import FLOOR_CATEGORIES, profile_engine

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    "engine", "postgres", "s3", "rss", "cores", "control", "batching", "partitions", "launch", "snapshot", "profile",
    "parquet",
    "compare",
    "reconcile",
    "metadata",
    "daemon",
)  # fmt: skip


@dataclass
class Report:
    """Rows of the results table, ratios and notes, in the order they were measured."""

    rows: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)
    ratios: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, r: dict[str, Any]) -> dict[str, Any]:
        rows, wall, cpu = r["rows"], r["wall"], r["cpu"]
        self.rows.append(
            (
                name,
                f"{rows:,}",
                f"{rows / wall:,.0f}" if wall else "-",
                f"{rows / cpu:,.0f}" if cpu else "-",
                f"{cpu / rows * 1e6:.2f}" if rows and cpu else "-",
                f"{r['peak_rss_mb']:.0f}",
            )
        )
        self.raw[name] = r
        print(f"  {name:<48} {self.rows[-1][2]:>10} rows/s  {self.rows[-1][3]:>10} rows/cpu-s  "
              f"{self.rows[-1][5]:>6} MB", flush=True)  # fmt: skip
        return r

    def ratio(self, name: str, value: float, target: str = "", unit: str = "×") -> None:
        shown = f"{value:.2f}{unit}" if unit == "×" else f"{value:.3g} {unit}"
        self.ratios.append((name, shown, target))
        print(f"  {name:<64} {shown:>9}  {target}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)


def child(task: str, module: str = "benchmarks.child", **params: Any) -> dict[str, Any]:
    args = [task, json.dumps(params)] if module == "benchmarks.child" else [json.dumps(params)]
    out = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmark task {task} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def children(tasks: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run tasks at the same time, each in its own process; once every one is set up (its first
    line, ``ready``: `child.start_together`), tell them all to start."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.child", task, json.dumps(params | {"together": True})],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task, params in tasks
    ]
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready"; or "" if it failed in its setup (reported below)
    for proc in procs:
        assert proc.stdin is not None
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        except BrokenPipeError:  # it failed in its setup: reported below
            pass
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"parallel benchmark task failed:\n{stderr[-3000:]}")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


def migrated_control_plane(path: Path) -> None:
    from seqexport_dagster.delivery.assembly import control_plane_at
    from seqexport_dagster.store.crypto import new_key_spec

    store = control_plane_at(f"sqlite:///{path}", new_key_spec("bench"))
    try:
        store.migrate()
    finally:
        store.engine.dispose()


def per_core(r: dict[str, Any]) -> float:
    return float(r["rows"] / r["cpu"])


# --- sections -------------------------------------------------------------------------------------


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median CPU per row, carrying every run's rows/cpu-s as its spread."""
    ordered = sorted(runs, key=lambda r: r["cpu"] / r["rows"] if r["rows"] else r["cpu"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["spread_rows_per_cpu_s"] = [round(r["rows"] / r["cpu"]) for r in runs if r["cpu"]]
    return chosen


def spread(r: dict[str, Any]) -> str:
    values = r.get("spread_rows_per_cpu_s") or []
    return f"{min(values):,}–{max(values):,}" if values else "-"


def peer_child(python: Path, module: str, **params: Any) -> dict[str, Any]:
    """A measurement run by a peer's own interpreter (benchmarks/peers.py); ``module`` imports only
    the standard library, the peer's packages and `benchmarks.procinfo`."""
    out = subprocess.run(
        [str(python), "-m", module, json.dumps(params)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"peer benchmark {module} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def engine_section(
    rep: Report, src: data.Source, size: int, tmp: str, *, quick: bool, repeat: int, data_dir: Path
) -> None:
    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.contract.window import iso_ms

    to_ms, rows = src.windows[size]
    common = {"source_url": src.url, "source_path": str(src.path), "to_ms": to_ms, "tmp": tmp}
    peer = peer_python(data_dir)
    same_sql = {"source_path": str(src.path), "account": data.ACCOUNT, "from": iso_ms(data.DAY0), "to": iso_ms(to_ms),
                "columns": list(DATASETS["email_events"].field_names), "tmp": tmp, "threads": 1}  # fmt: skip
    print(f"1. engine and peers: SQLite -> gzip JSONL, {rows:,} email-event rows, {repeat} interleaved runs each")
    # Interleaved, so a neighbour's burst of load hits them all alike; the median run of each is kept.
    runs: dict[str, list[dict[str, Any]]] = {"engine": [], "floor": [], "duckdb_sqlite": [], "duckdb": []}
    for _ in range(repeat):
        runs["engine"].append(child("engine", **common))
        runs["floor"].append(child("floor", **common))
        runs["duckdb_sqlite"].append(peer_child(peer, "benchmarks.duckdb_sqlite", **same_sql))
        # async_threads=0: DuckDB 2 otherwise hands work to 8 I/O threads even with threads=1.
        runs["duckdb"].append(child("duckdb", threads=1, async_threads=0, **common))
    eng = rep.add("engine: Runner.write_window -> local parts", median_run(runs["engine"]))
    flo = rep.add("floor: read + build + encode + compress, streamed", median_run(runs["floor"]))
    phases = flo["phases"]
    for name, label in (("read", "DBAPI fetchmany"), ("build", "tuples -> Structs"),
                        ("encode", "msgspec encode_lines"), ("compress", "isal level 1")):  # fmt: skip
        ph = phases[name]
        rep.add(f"  floor step {name} ({label})", {"rows": flo["rows"], "wall": 0.0, "cpu": ph["cpu"],
                                                    "peak_rss_mb": flo["peak_rss_mb"]})  # fmt: skip
    duck_sql = rep.add("DuckDB: ATTACH the SQLite file, COPY ... (FORMAT JSON, COMPRESSION GZIP), 1 thread",
                       median_run(runs["duckdb_sqlite"]))  # fmt: skip
    duck = rep.add("DuckDB: COPY from its own table (rows preloaded, untimed), 1 thread", median_run(runs["duckdb"]))
    duck2 = duck if quick else rep.add("DuckDB: COPY from its own table, default threads (2) and I/O threads",
                                       child("duckdb", threads=2, **common))  # fmt: skip
    apsw = peer_python(data_dir, APSW_PEER)
    rep.add(
        "read alone: APSW, rows dropped (not used: a second SQLite)",
        peer_child(apsw, "benchmarks.apsw_read", **same_sql),
    )
    levels = rep.add("gzip alone on the engine's JSON lines: isal level 1", child("gzip_levels", **common))
    rep.add("gzip alone on the same lines: zlib level 6 (gzip's and DuckDB's default)", levels["zlib6"])
    pand = rep.add("pandas read_sql + to_json(lines, gzip)", child("pandas", **common))
    rep.ratio(
        "engine vs DuckDB reading the same SQLite file (per core, CPU-s per row)",
        duck_sql["cpu"] / duck_sql["rows"] / (eng["cpu"] / eng["rows"]),
        "target >= 4x",
    )
    rep.ratio(
        "engine vs DuckDB from its own table, its best case (per core)",
        duck["cpu"] / duck["rows"] / (eng["cpu"] / eng["rows"]),
    )
    rep.ratio(
        "engine on 1 core vs DuckDB from its own table on 2 threads (wall rows/s)",
        (eng["rows"] / eng["wall"]) / (duck2["rows"] / duck2["wall"]),
    )
    rep.ratio("engine vs pandas (per core)", (pand["cpu"] / pand["rows"]) / (eng["cpu"] / eng["rows"]))
    rep.ratio(
        "engine CPU / floor CPU (the same four steps, streamed alone)",
        (eng["cpu"] / eng["rows"]) / (flo["cpu"] / flo["rows"]),
        "target <= 1.35x",
    )
    rep.ratio("engine per core / 300k rows/s target", per_core(eng) / 300_000, "target >= 1x")
    rep.ratio("compression ratio (JSON bytes / gzip bytes)", flo["json_bytes"] / flo["gzip_bytes"])
    rep.ratio("DuckDB's compression ratio (same JSON bytes / its gzip bytes)", flo["json_bytes"] / duck["bytes"])
    rep.ratio("zlib level 6 vs isal level 1, CPU per row on the same lines", levels["zlib6"]["cpu"] / levels["cpu"])
    rep.note(f"rows/cpu-s over the {repeat} runs, min–max: engine {spread(eng)}; floor {spread(flo)}; "
             f"DuckDB from SQLite {spread(duck_sql)}; DuckDB from its table {spread(duck)}. The table shows "
             "each one's median run.")  # fmt: skip
    rep.note(f"avg JSON line {flo['json_bytes'] / flo['rows']:.0f} B; engine wrote {eng['parts']} parts, "
             f"{eng['bytes'] / 2**20:.0f} MiB gzip; DuckDB {duck['bytes'] / 2**20:.0f} MiB; pandas {pand['bytes'] / 2**20:.0f} MiB")  # fmt: skip
    rep.note(f"DuckDB reading SQLite is DuckDB {duck_sql['duckdb']} with the sqlite extension from PyPI "
             "(duckdb-extension-sqlite-scanner; DuckDB's own download site is out of reach here), in its own "
             "virtualenv (benchmarks/peers.py). DuckDB from its own table is the project's DuckDB with the rows "
             "loaded before the clock starts: no read at all, its best case. Both compress with zlib's "
             "default level: smaller files, much more CPU (the gzip rows above).")  # fmt: skip
    rep.note(f"pandas peak RSS {pand['peak_rss_mb']:.0f} MB vs engine {eng['peak_rss_mb']:.0f} MB on the same rows")
    rep.note(
        "The floor streams the same rows through the engine's four steps and nothing else, in the engine's "
        "batches of 500 rows, timing each step around its call; engine / floor is what the ledger, the part "
        "bookkeeping and the destination's writes add."
    )
    read_rate = per_core({"rows": flo["rows"], "cpu": phases["read"]["cpu"]})
    rep.note(f"Machine calibration: sqlite3 reads {read_rate:,.0f} rows/cpu-s here vs 440k in DESIGN §9.")


def parquet_section(
    rep: Report, src: data.Source, size: int, sizes: list[int], tmp: str, *, repeat: int, data_dir: Path
) -> None:
    """Issue 27: our Parquet engine beside DuckDB's Parquet writer (from the SQLite file and from its own
    table), pandas/pyarrow and our JSONL engine, on the same rows, interleaved; then RSS by window size."""
    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.contract.window import iso_ms

    to_ms, rows = src.windows[size]
    common = {"source_url": src.url, "source_path": str(src.path), "to_ms": to_ms, "tmp": tmp}
    peer = peer_python(data_dir)
    same_sql = {"source_path": str(src.path), "account": data.ACCOUNT, "from": iso_ms(data.DAY0), "to": iso_ms(to_ms),
                "columns": list(DATASETS["email_events"].field_names), "tmp": tmp, "threads": 1,
                "format": "parquet"}  # fmt: skip
    print(f"P. Parquet: SQLite -> zstd Parquet, {rows:,} email-event rows, {repeat} interleaved runs each")
    runs: dict[str, list[dict[str, Any]]] = {"parquet": [], "duckdb_sqlite": [], "duckdb": [], "jsonl": []}
    for _ in range(repeat):
        runs["parquet"].append(child("engine", format="parquet", **common))
        runs["duckdb_sqlite"].append(peer_child(peer, "benchmarks.duckdb_sqlite", **same_sql))
        runs["duckdb"].append(child("duckdb", threads=1, async_threads=0, format="parquet", **common))
        runs["jsonl"].append(child("engine", **common))
    ours = rep.add("Parquet engine: Runner.write_window -> local .parquet parts", median_run(runs["parquet"]))
    duck_sql = rep.add("DuckDB: ATTACH the SQLite file, COPY (FORMAT PARQUET, COMPRESSION ZSTD), 1 thread",
                       median_run(runs["duckdb_sqlite"]))  # fmt: skip
    duck = rep.add("DuckDB: COPY (FORMAT PARQUET, ZSTD) from its own table, 1 thread", median_run(runs["duckdb"]))
    pand = rep.add("pandas read_sql + to_parquet(pyarrow, zstd)", child("pandas_parquet", **common))
    jsonl = rep.add("JSONL engine on the same rows (gzip JSON Lines)", median_run(runs["jsonl"]))
    cost = ours["cpu"] / ours["rows"]
    rep.ratio("Parquet engine vs DuckDB reading the same SQLite file (per core)", duck_sql["cpu"] / duck_sql["rows"] / cost,
              "target >= 1x")  # fmt: skip
    rep.ratio("Parquet engine vs DuckDB from its own table (per core)", duck["cpu"] / duck["rows"] / cost)
    rep.ratio("Parquet engine vs pandas/pyarrow (per core)", pand["cpu"] / pand["rows"] / cost)
    rep.ratio("Parquet engine CPU per row / JSONL engine CPU per row", cost / (jsonl["cpu"] / jsonl["rows"]))
    rep.ratio("Parquet bytes / JSONL gzip bytes (same rows)", ours["bytes"] / jsonl["bytes"])
    rep.ratio("Parquet bytes / DuckDB's Parquet bytes", ours["bytes"] / duck_sql["bytes"])
    # Peak RSS by window size, both formats: the rss section.
    rep.note(f"Parquet median runs: ours {spread(ours)} rows/cpu-s, DuckDB from SQLite {spread(duck_sql)}; "
             f"pandas peak RSS {pand['peak_rss_mb']:.0f} MB vs ours {ours['peak_rss_mb']:.0f} MB")  # fmt: skip


def compare_section(rep: Report, src: data.Source, size: int, tmp: str, pg_name: str, *, rounds: int,
                    data_dir: Path, out: Path) -> None:  # fmt: skip
    """Issue 46: engine, DuckDB, floor and pyarrow on window-sized SQLite and PostgreSQL sources
    (benchmarks/compare.py), ``rounds`` rotated rounds."""
    from benchmarks import compare

    print(f"C. side by side on window-sized sources, SQLite and PostgreSQL, {rounds} rounds")
    found = compare.compare(src, size, tmp, pg_name=pg_name, rounds=rounds, data_dir=data_dir, child=child,
                            peer_child=peer_child)  # fmt: skip
    rep.raw["compare"] = found
    for line in compare.table(found):
        if line:
            print(f"  {line}")
    rep.note("Side by side (benchmarks/compare.py):\n\n" + "\n".join(compare.table(found)))
    compare.save(found, out)


def postgres_section(rep: Report, src: data.Source, size: int, tmp: str, pg_name: str) -> None:
    print("2. PostgreSQL source")
    url = data.ensure_postgres(src, size, pg_name)
    to_ms, _rows = src.windows[size]
    dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={pg_name}"
    rep.add("PostgreSQL: COPY (SELECT ...) TO STDOUT, unparsed", child("pg_copy", dsn=dsn, to_ms=to_ms))
    read = rep.add("PostgreSQL: SourceReader.window_batches only", child("source_read", source_url=url, to_ms=to_ms))
    eng = rep.add("engine: PostgreSQL -> local parts", child("engine", source_url=url, to_ms=to_ms, tmp=tmp))
    rep.ratio("engine from PostgreSQL per core / 200k rows/s target", per_core(eng) / 200_000, "target >= 1x")
    rep.ratio("PostgreSQL reader share of engine CPU", read["cpu"] / eng["cpu"])


def s3_section(rep: Report, src: data.Source, size: int, tmp: str) -> None:
    sys.path.insert(0, str(ROOT))
    from seqexport_dagster_tests.support import moto_server

    print("3. S3 sink through moto's server")
    to_ms, _rows = src.windows[size]
    server = moto_server.start()
    try:
        server.admin_client().create_bucket(Bucket="bench-bucket")
        r = rep.add(
            "engine: SQLite -> S3 (moto server, PutObject)",
            child("engine", source_url=src.url, to_ms=to_ms, tmp=tmp,
                  s3={"bucket": "bench-bucket", "endpoint": server.endpoint}),
        )  # fmt: skip
    finally:
        server.stop()
    rep.ratio("share of wall time uploading (PutObject to moto)", r["upload_s"] / r["wall"])


def rss_section(rep: Report, src: data.Source, sizes: list[int], tmp: str) -> None:
    print("4. peak RSS of the engine by window size, gzip JSONL and Parquet (fresh process each)")
    peaks = []
    main = rep.raw.get("engine: Runner.write_window -> local parts")
    for size in sizes:
        to_ms, rows = src.windows[size]
        # The main engine measurement already ran this window in a fresh process: reuse it.
        found = main if main and main["rows"] == rows else child("engine", source_url=src.url, to_ms=to_ms, tmp=tmp)
        r = rep.add(f"engine RSS: window of {rows:,} rows", found)
        peaks.append(r["peak_rss_mb"])
        rep.note(f"window {rows:,}: peak RSS {r['peak_rss_mb']:.0f} MB, of which {r['rss_before_mb']:.0f} MB "
                 "before the window (interpreter, SQLAlchemy, psycopg2, cryptography; no Dagster, no Alembic)")  # fmt: skip
    rep.ratio("peak RSS largest / smallest window", peaks[-1] / peaks[0], "flat, <= 100 MB")
    rep.ratio("JSONL engine peak RSS, largest window (MB)", peaks[-1], "target <= 100 MB", unit="MB")
    parquet = []
    for size in sizes:
        to_ms, rows = src.windows[size]
        r = rep.add(f"Parquet engine RSS: window of {rows:,} rows",
                    child("engine", source_url=src.url, to_ms=to_ms, tmp=tmp, format="parquet"))  # fmt: skip
        parquet.append(r["peak_rss_mb"])
        if "rss_file_end_mb" in r:
            rep.note(f"Parquet window {rows:,}: peak RSS {r['peak_rss_mb']:.0f} MB; at the end "
                     f"{r['rss_anon_end_mb']:.0f} MB anonymous, {r['rss_file_end_mb']:.0f} MB file-backed "
                     "(shared library pages: libarrow, libparquet, numpy, ...)")  # fmt: skip
    rep.ratio("Parquet engine peak RSS, largest window (MB)", parquet[-1], "target <= 150 MB", unit="MB")


def side_by_side(task: str, params: dict[str, Any], halves: list[dict[str, Any]]) -> dict[str, Any]:
    """Two processes that set up first and then start their timed sections at the same instant; wall
    time runs from that instant to the later one's end, so the two really share the machine."""
    found = children([(task, params | half) for half in halves])
    span = max(h["ended_at"] for h in found) - min(h["started_at"] for h in found)
    return _total(found) | {"wall": span, "half_rows": [h["rows"] for h in found]}


def speedup(one: dict[str, Any], two: dict[str, Any]) -> float:
    return float((two["rows"] / two["wall"]) / (one["rows"] / one["wall"]))


def cores_section(rep: Report, src: data.Source, size: int, tmp: str, *, repeat: int, quick: bool) -> None:
    pairs = repeat if quick else max(repeat, 5)  # the pairs vary more than single runs: take more of them
    print(f"5. two cores: two exports catching up at once vs one alone, {pairs} interleaved pairs")
    to_ms, rows = src.windows[size]
    # A run handles one export at a time (the queue allows one run per export), so two processes
    # means two exports. They are the window's two halves, with equal rows, and share one control
    # plane, as two run workers do.
    mid = data.row_midpoint(src, to_ms)
    common = {"source_url": src.url, "tmp": tmp}
    # The loop calibrates the figure, a second of CPU a run; --quick (the smoke test) only shows it runs.
    spin = {"loops": 2_000_000} if quick else {}
    ones, twos, spins = [], [], []
    for n in range(pairs):
        ones.append(child("engine", **common, to_ms=to_ms))
        shared = {"control_path": str(Path(tmp) / f"shared-control-{n}.db")}
        twos.append(side_by_side("engine", common | shared, [{"to_ms": mid}, {"from_ms": mid, "to_ms": to_ms}]))
        spins.append((child("spin", **spin), side_by_side("spin", spin, [{}, {}])))
    pair_speedups = [speedup(one, two) for one, two in zip(ones, twos, strict=True)]
    overall = speedup(_total(ones), _total(twos))
    spin_overall = speedup(_total([a for a, _ in spins]), _total([b for _, b in spins]))
    one = rep.add(f"engine: 1 export alone, whole window ({pairs} runs summed)", _total(ones))
    two = rep.add(f"engine: 2 exports at once, half the window each ({pairs} pairs summed)",
                  _total(twos) | {"half_rows": twos[0]["half_rows"]})  # fmt: skip
    rep.ratio(f"2 processes vs 1 (wall rows/s, all {pairs} pairs together)", overall, "target >= 1.7x")
    rep.ratio("machine: 2 pure-CPU loops vs 1, measured between the pairs", spin_overall)
    rep.note(f"two cores: the {pairs} pairs one by one {', '.join(f'{s:.2f}x' for s in pair_speedups)} "
             f"{' (a pair above 2x had a slow single run)' if max(pair_speedups) > 2 else ''}; halves of {' + '.join(f'{n:,}' for n in twos[0]['half_rows'])} "
             f"rows; CPU per row {two['cpu'] / two['rows'] * 1e6:.2f} µs side by side vs "
             f"{one['cpu'] / one['rows'] * 1e6:.2f} µs alone. A loop that needs no memory, run the same way, "
             f"scales {', '.join(f'{speedup(a, b):.2f}x' for a, b in spins)}: the two vCPUs are shared with the "
             "host's other tenants.")  # fmt: skip


def _total(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs as one: rows, wall and CPU summed; the highest peak RSS."""
    return {
        "rows": sum(r["rows"] for r in runs),
        "wall": sum(r["wall"] for r in runs),
        "cpu": sum(r["cpu"] for r in runs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }


def control_section(rep: Report, counts: list[int], tmp: str, *, quick: bool) -> None:
    print("6. control loop")
    for n in counts:
        r = child("tick", exports=n, tmp=tmp)
        rep.raw[f"tick_{n}"] = r
        rep.ratio(f"sensor tick at {n:,} exports (median of {r['ticks']})", r["tick_s"], "<= 1 s at 1,000", unit="s")
        rep.note(f"tick at {n:,} exports: {r['requests']} batched run requests carrying {r['exports_requested']} exports; of the {r['tick_s']:.3f} s, the policy "
                 f"(list_exports + planner.due_work) takes {r['policy_s']:.3f} s; via {r['via']}")  # fmt: skip


def batching_section(rep: Report, tmp: str, *, quick: bool) -> None:
    """Runs and run-worker CPU per export-window: one run per export (the old layout) beside a
    batched run of 50 exports, measured in this run with the same worker command. ``--quick``
    (the smoke test) plans 200 exports and batches 10: the same code, a fifth of the time."""
    planned, batched = (200, 10) if quick else (1000, 50)
    sim = child("runs", exports=planned)
    rep.raw["runs_simulation"] = sim
    one = child("worker", tmp=tmp, exports=1)
    many = child("worker", tmp=tmp, exports=batched)
    rep.raw["worker"], rep.raw["worker_batch"] = one, many
    # Each export writes one window per event dataset (three) for the day of the run.
    per_one, per_many = one["cpu"] / 3, many["cpu"] / (batched * 3)
    rep.ratio(
        f"runs launched, {planned:,} exports at 15 min over a simulated hour: one per export",
        sim["old_runs"],
        unit="runs",
    )
    rep.ratio("runs launched, the same hour, batched (planner.batch)", sim["new_runs"], unit="runs")
    rep.ratio("fewer runs, batched vs one per export", sim["old_runs"] / max(sim["new_runs"], 1), "target >= 20x")
    rep.ratio("run-worker CPU per export-window, one export per run (old layout)", per_one, unit="CPU-s")
    rep.ratio(f"run-worker CPU per export-window, {batched} exports per run", per_many, "<= 0.1 CPU-s", unit="CPU-s")
    rep.ratio("run-worker CPU per export-window, old / batched", per_one / per_many if per_many else 0.0)
    rep.ratio(f"run-worker peak RSS, 1 export / {batched} exports", many["worker_peak_rss_mb"], "", unit="MB")
    rep.note(f"runs: {sim['export_windows']:,} export-windows in the simulated hour; "
             f"old {sim['old_runs']:,} runs, batched {sim['new_runs']:,}")  # fmt: skip
    rep.note(f"run worker, one export: {one['note']}")
    rep.note(f"run worker, batch: {many['note']}")


def partitions_section(rep: Report, sizes: str, tmp: str, *, quick: bool) -> None:
    """The UI's cost of export × date beside day-only partitions (benchmarks/partition_health.py)."""
    print(f"6c. Dagster UI: export x date vs day-only partitions at {sizes} exports with two years of history")
    if quick:
        rep.note("TODO (--quick): partitions (PartitionHealthQuery, Chromium, webserver RSS) not measured in this run.")
        return
    out = Path(tmp) / "partitions.json"
    subprocess.run([sys.executable, "-m", "benchmarks.partition_health", "--sizes", sizes, "--out", str(out)],
                   cwd=ROOT, check=True)  # fmt: skip
    results = json.loads(out.read_text())
    rep.raw["partitions"] = results
    for r in results:
        layout = "export x date (old)" if r["layout"] == "old" else "day only (new)"
        n = f"{r['n']:,} exports, {layout}"
        rep.ratio(f"PartitionHealthQuery warm, {n}", r["warm_s"], "<= 0.3 s at 3,000 (new)", unit="s")
        rep.ratio(f"PartitionHealthQuery cold, {n}", r["cold_s"], unit="s")
        rep.ratio(f"PartitionHealthQuery after one new export, {n}", r["after_new_export_s"], "<= 1 s (new)", unit="s")
        if r.get("render_s") is not None:
            rep.ratio(f"partitions tab in headless Chromium, {n}", r["render_s"], "<= 2 s (new)", unit="s")
        rep.ratio(f"webserver + code server RSS, {n}", r["rss_mb"], "<= 300 MB (new)", unit="MB")
        rep.note(f"partitions {n}: {r['events']:,} materializations, response {r['bytes'] / 1e6:.2f} MB")


def reconcile_section(rep: Report, *, quick: bool) -> None:
    """A scheduled run's CPU per export-window with 24 h of history, full recheck beside the
    recheck thinned with age, in one run (benchmarks/reconcile_cost.py, issue 29)."""
    exports = 2 if quick else 20
    print(f"6d. scheduled runs with reconciliation: {exports} exports at 15 min, 24 h of history")
    out = subprocess.run([sys.executable, "-m", "benchmarks.reconcile_cost", "--exports", str(exports), "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    rep.raw["reconcile"] = r
    target = "<= 0.05 (issue 29)"
    rep.ratio("run-worker CPU-s per export-window, full recheck (before)", r["before_cpu_s_per_window"], unit="CPU-s")
    rep.ratio("run-worker CPU-s per export-window, thinned (after)", r["after_cpu_s_per_window"], target, unit="CPU-s")
    rep.ratio("reconciliation CPU, before / after", r["reconcile_before_cpu_s_per_window"]
              / r["reconcile_after_cpu_s_per_window"])  # fmt: skip
    rep.note(f"reconcile: {r['exports']} exports x 2 event datasets on {r['database']}, 4 due slots after 24 h of "
             f"history ({r['exports_by_runner']} by the runner, {r['exports_copied']} bulk-copied, differences from "
             f"the runner's rows: {len(r['copy_differences'])}); the write of the due window is included, Dagster's "
             "own run overhead is not")  # fmt: skip


def metadata_section(rep: Report, tmp: str, *, quick: bool) -> None:
    """Control-plane metadata over a year at 3,000 exports, before and after compaction (benchmarks/metadata_year.py)."""
    print("6d. control plane: one year of history at 3,000 exports, today's shapes vs compaction")
    out = Path(tmp) / "metadata.json"
    subprocess.run([sys.executable, "-m", "benchmarks.metadata_year", "--out", str(out), *(["--quick"] if quick else [])],
                   cwd=ROOT, check=True)  # fmt: skip
    r = json.loads(out.read_text())
    rep.raw["metadata"] = r
    p = r["projection"]
    rep.ratio("control plane, today: GB a day at 3,000 exports (15 min)", p["before_gb_per_day"], unit="GB")
    rep.ratio("control plane, today: GB after 2 years", p["before_gb_2_years"], unit="GB")
    rep.ratio("control plane, compacted: GB steady state for 2 years", p["after_gb_2_years"], "<= 20 GB", unit="GB")
    rep.ratio("control plane, 2 years: today / compacted", p["before_gb_2_years"] / p["after_gb_2_years"])
    for name in ("sensor_tick_queries_s", "status_s", "history_s", "verify_ledger_s"):
        before, after = r["before"]["times"][name], r["after"]["times"][name]
        rep.ratio(f"{name.removesuffix('_s').replace('_', ' ')}: today / compacted ({before:.3f} s / {after:.3f} s)",
                  before / after if after else 0.0)  # fmt: skip
    b, a = r["before"]["sizes"], r["after"]["sizes"]
    rep.note(f"metadata: {r['exports']:,} exports ({r['deep_exports']} with {r['days']} days, the rest 1 day); "
             f"database {b['database_bytes'] / 1e9:.2f} GB as generated, {a['database_bytes'] / 1e9:.2f} GB after "
             f"maintain + the fleet's summaries (VACUUM FULL); maintain took {r['maintain_s']:.0f} s")  # fmt: skip


def event_log_section(rep: Report, tmp: str, *, quick: bool) -> None:
    """Dagster's event log per day at 3,000 exports at 15 minutes (benchmarks/event_log_day.py)."""
    out = Path(tmp) / "event_log.json"
    sizes = ["--exports", "300", "--batch", "10", "--slots", "2"] if quick else []
    subprocess.run([sys.executable, "-m", "benchmarks.event_log_day", "--out", str(out), *sizes], cwd=ROOT,
                   check=True)  # fmt: skip
    r = json.loads(out.read_text())
    rep.raw["event_log"] = r
    n = f"{r['exports']:,} exports at 15 min, {r['batch']} per run"
    rep.ratio(f"Dagster event log, MB a day ({n})", r["event_log_mb_per_day"], "<= 100 MB (issue 23)", unit="MB")
    rep.ratio(f"Dagster event log, rows a day ({n})", r["event_log_rows_per_day"], unit="rows")
    rep.ratio(f"Dagster run storage (runs, run_tags), MB a day ({n})", r["run_storage_mb_per_day"], unit="MB")
    for batch, mb in r["event_log_mb_per_day_by_batch"].items():
        rep.ratio(f"Dagster event log, MB a day at {batch} exports per run (same bytes per run)", mb, unit="MB")
    t = r["template_run"]
    rep.note(f"event log: {r['runs_per_day']:,} runs a day of {t['rows']} rows and {t['bytes']:,} bytes of event JSON "
             f"each (median real run, {t['by_type']}), {r['event_log_bytes_per_run']:,.0f} bytes per run in PostgreSQL "
             f"with indexes; {r['status_observations_per_day']:,} export_status observations "
             f"({r['status_event_bytes']:,} bytes each), {r['status_mb_per_day']:.1f} MB; load {r['load']}")  # fmt: skip


def daemon_section(rep: Report, sizes: str, *, quick: bool) -> None:
    """The daemon's tick (sensor + storing its events in a PostgreSQL instance), before and after
    the bounded day cells, in one run (benchmarks/daemon_tick.py)."""
    sizes = sizes.split(",")[0] if quick else sizes  # the smoke test: its smallest size only
    print(f"6e. the daemon's tick at {sizes} exports on PostgreSQL, before and after")
    out = subprocess.run([sys.executable, "-m", "benchmarks.daemon_tick", "--exports", sizes], cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
    results = json.loads(out.stdout[out.stdout.index("[") :])
    rep.raw["daemon_tick"] = results
    for r in results:
        n = f"{r['exports']:,} exports"
        b, a = r["before"], r["after"]
        rep.ratio(f"daemon tick as a day completes, {n}: before, the tick (wall)", b["day"]["max_wall_s"], unit="s")
        rep.ratio(f"daemon tick as a day completes, {n}: after, the longest of {a['day']['ticks']} ticks (wall)",
                  a["day"]["max_wall_s"], "<= 5 s at 10,000", unit="s")  # fmt: skip
        rep.ratio(f"daemon tick as a day completes, {n}: after, CPU of the longest", a["day"]["max_cpu_s"],
                  "<= 1 CPU-s at 10,000", unit="CPU-s")  # fmt: skip
        for kind in ("steady", "slot_cold", "slot"):
            rep.ratio(f"daemon tick, {kind}, {n}: before / after (wall, median)",
                      b[kind]["wall_s"] / a[kind]["wall_s"] if a[kind]["wall_s"] else 0.0)  # fmt: skip
            rep.ratio(f"daemon tick, {kind}, {n}: after (CPU, median)", a[kind]["cpu_s"], "<= 1 CPU-s at 10,000",
                      unit="CPU-s")  # fmt: skip
        e = r["explain"]
        rep.note(f"daemon tick {n}: day-totals query over yesterday's email_events (EXPLAIN ANALYZE) "
                 f"{e['before_day_ms']:.0f} ms before, {e['after_day_ms']:.0f} ms after; slot tick requests "
                 f"{a['slot']['runs']} runs (counted, not created); load {r['load']}")  # fmt: skip


def launch_section(rep: Report, runs: int, tmp: str, *, quick: bool) -> None:
    """The real dagster-daemon launching the runs of one sensor tick (benchmarks/launch.py)."""
    print(f"6b. dagster-daemon launching the batched runs of {runs} exports due at one sensor tick")
    if quick:
        rep.note("TODO (--quick): runs launched per second by the daemon not measured in this run (~4 min).")
        return
    for threads in (False, True):
        r = child("launch", module="benchmarks.launch", runs=runs, threads=threads, tmp=tmp)
        mode = "dequeue_use_threads" if threads else "sequential dequeue"
        rep.raw[f"launch_{mode}"] = r
        rep.ratio(f"exports done per second by the daemon ({mode}, {r['exports']} exports in {r['runs']} runs)",
                  r["exports_per_s"], unit="exports/s")  # fmt: skip
        rep.ratio(f"run-worker CPU per daemon-launched run ({mode})", r["worker_cpu_s"], unit="CPU-s")
        rep.note(f"launch: {r['summary']}")


def snapshot_section(rep: Report, src: data.Source, tmp: str) -> None:
    print(f"7. subscriber snapshot of {src.subscribers:,} subscribers")
    r = rep.add(
        "engine: Runner.write_snapshot -> local parts",
        child("engine", source_url=src.url, dataset="subscribers", to_ms=0, tmp=tmp),
    )
    rep.note(f"snapshot of {r['rows']:,} subscribers: {r['wall']:.1f} s wall, {r['cpu']:.1f} CPU-s, "
             f"peak RSS {r['peak_rss_mb']:.0f} MB, {r['parts']} parts")  # fmt: skip


def profile_section(rep: Report, src: data.Source, size: int, tmp: str, out: Path) -> None:

    print("profile: py-spy (native frames) of one engine run on the same window")
    to_ms, _ = src.windows[size]
    found = profile_engine({"source_url": src.url, "to_ms": to_ms, "tmp": tmp}, out)
    rep.raw["profile"] = found
    if "error" in found:
        rep.note(f"profile not taken: {found['error']}")
        return
    engine = rep.raw.get("engine: Runner.write_window -> local parts")
    us_per_row = engine["cpu"] / engine["rows"] * 1e6 if engine else None
    for item in found["breakdown"]:
        cost = f", ~{item['share'] * us_per_row:.2f} µs/row" if us_per_row else ""
        where = "floor step" if item["category"] in FLOOR_CATEGORIES else "engine only"
        print(f"  {item['share']:6.1%}  {item['category']} ({where}{cost})")
    outside = sum(i["share"] for i in found["breakdown"] if i["category"] not in FLOOR_CATEGORIES)
    rep.ratio("profile: share of engine samples outside the floor's steps", outside)
    print(f"  written to {out}")


# --- output -----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_results(
    path: Path, rep: Report, info: dict[str, str], args: argparse.Namespace, profile: Path | None
) -> None:
    lines = [
        "# Benchmark results",
        "",
        "Written by `python -m benchmarks` (`make bench`); every figure below comes from one run on the same",
        "generated rows. *rows/cpu-s* is rows per CPU-second of the measuring process: the per-core figure.",
        "",
        f"- Date: {info['date']}",
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; {info['platform']}; Python {info['python']}",
        f"- Load average at start / end: {info['load_start']} / {info['load_end']} (other work on the machine inflates wall times, not CPU-s)",
        f"- Command: `python -m benchmarks --rows {args.rows} --subscribers {args.subscribers}`; run time {info['elapsed']}",
        "",
        "## Ratios",
        "",
        "| Figure | Value | Target |",
        "|---|---:|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rep.ratios),
        "",
        "## Measurements",
        "",
        "| Measurement | Rows | rows/s (wall) | rows/cpu-s | CPU µs/row = CPU-s per 1M rows | Peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {' | '.join(r)} |" for r in rep.rows),
        "",
        "## Notes",
        "",
        *(f"- {n}" for n in rep.notes),
        "",
    ]
    found = rep.raw.get("profile")
    if profile and isinstance(found, dict) and "breakdown" in found:
        engine = rep.raw.get("engine: Runner.write_window -> local parts")
        us = engine["cpu"] / engine["rows"] * 1e6 if engine else 0.0
        lines += [
            "## Where the engine's CPU goes (py-spy --native)",
            "",
            f"{found['samples']:,} samples inside `Runner.write_window`, one engine run on the same window. "
            "µs/row applies each share to the median engine run above. *floor* marks the steps the floor "
            "has too; the rest is the gap between the engine and the floor.",
            "",
            "| Where | Share | µs/row | |",
            "|---|---:|---:|---|",
            *(
                f"| {i['category']} | {i['share']:.1%} | {i['share'] * us:.2f} | "
                f"{'floor' if i['category'] in FLOOR_CATEGORIES else 'engine only'} |"
                for i in found["breakdown"]
            ),
            "",
        ]
    path.write_text("\n".join(lines))


def load_average() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the main window (default 1M)")
    parser.add_argument("--subscribers", type=int, default=1_000_000, help="subscribers in the snapshot")
    parser.add_argument("--data-dir", type=Path, default=data.DATA_DIR, help="where the generated source is cached")
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "RESULTS.md")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--ticks", default="100,1000,3000", help="export counts for the scheduler tick")
    parser.add_argument("--daemon-ticks", default="300,1000",
                        help="export counts for the daemon tick section (issue 29's figures: 3000,10000)")  # fmt: skip
    parser.add_argument("--launch-runs", type=int, default=20, help="due exports for the daemon launch section")
    parser.add_argument("--partition-sizes", default="300,1000,3000", help="export counts for the partitions section")
    parser.add_argument("--repeat", type=int, default=3,
                        help="interleaved runs of the engine, the floor and DuckDB; the median is kept")  # fmt: skip
    parser.add_argument("--compare-rounds", type=int, default=5, help="rounds of the compare section (issue 46)")
    parser.add_argument("--quick", action="store_true",
                        help="skip the slow extras (DuckDB on 2 threads, the Dagster run worker, the profile)")  # fmt: skip
    parser.add_argument("--scratch", action="store_true",
                        help="use a throwaway PostgreSQL database (dropped at the end) instead of the cached one")  # fmt: skip
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    started = time.monotonic()
    info = machine() | {"load_start": load_average()}
    print(f"seqexport benchmarks: {args.rows:,} rows, {info['cpu']}, {info['cores']} cores, load {info['load_start']}")
    src = data.ensure_source(args.rows, args.subscribers, args.data_dir)
    pg_name = f"seqexport_bench_{secrets.token_hex(4)}" if args.scratch else f"seqexport_bench_{args.rows}"
    rep = Report()
    profile = args.data_dir / "profile.json"
    with tempfile.TemporaryDirectory(prefix="seqexport-bench-", dir=args.data_dir) as tmp:
        migrated_control_plane(Path(tmp) / CONTROL_TEMPLATE)
        sections: dict[str, Any] = {
            "engine": lambda: engine_section(rep, src, args.rows, tmp, quick=args.quick, repeat=args.repeat,
                                             data_dir=args.data_dir),
            "postgres": lambda: postgres_section(rep, src, args.rows, tmp, pg_name),
            "s3": lambda: s3_section(rep, src, args.rows, tmp),
            "rss": lambda: rss_section(rep, src, data.window_sizes(args.rows), tmp),
            "cores": lambda: cores_section(rep, src, args.rows, tmp, repeat=args.repeat, quick=args.quick),
            "control": lambda: control_section(rep, [int(n) for n in args.ticks.split(",")], tmp, quick=args.quick),
            "batching": lambda: batching_section(rep, tmp, quick=args.quick),
            "partitions": lambda: partitions_section(rep, args.partition_sizes, tmp, quick=args.quick),
            "launch": lambda: launch_section(rep, args.launch_runs, tmp, quick=args.quick),
            "snapshot": lambda: snapshot_section(rep, src, tmp),
            "parquet": lambda: parquet_section(rep, src, args.rows, data.window_sizes(args.rows), tmp,
                                               repeat=args.repeat, data_dir=args.data_dir),
            "compare": lambda: compare_section(rep, src, args.rows, tmp, pg_name, rounds=args.compare_rounds,
                                               data_dir=args.data_dir,
                                               out=args.results.with_name("RESULTS_compare.json")),
            "reconcile": lambda: reconcile_section(rep, quick=args.quick),
            "metadata": lambda: (metadata_section(rep, tmp, quick=args.quick), event_log_section(rep, tmp, quick=args.quick)),
            "daemon": lambda: daemon_section(rep, args.daemon_ticks, quick=args.quick),
            "profile": lambda: None if args.quick else profile_section(rep, src, args.rows, tmp, profile),
        }  # fmt: skip
        try:
            # Every section runs to the end whatever another did: a failure is recorded, shown in
            # RESULTS.md, and makes the exit status non-zero (test_benchmarks_smoke.py checks both).
            for name in SECTIONS:
                if name not in only:
                    continue
                try:
                    sections[name]()
                    rep.raw.setdefault("sections", {})[name] = "ran"
                except Exception as exc:  # one section's failure must not hide the others
                    rep.raw.setdefault("sections", {})[name] = f"failed: {type(exc).__name__}"
                    rep.note(f"SECTION {name} FAILED: {type(exc).__name__}: {str(exc)[-1500:]}")
        finally:
            if args.scratch and "postgres" in only:
                data.drop_postgres(pg_name)
    info |= {"load_end": load_average(), "elapsed": f"{time.monotonic() - started:.0f} s"}
    write_results(args.results, rep, info, args, profile if "profile" in only and not args.quick else None)
    (args.results.with_suffix(".json")).write_text(json.dumps({"machine": info, "raw": rep.raw}, indent=1, default=str))
    print(f"results written to {args.results} ({info['elapsed']})")
    failed = [n for n, state in rep.raw.get("sections", {}).items() if state != "ran"]
    if failed:
        print(f"sections that failed: {', '.join(failed)} (see the notes in {args.results})", file=sys.stderr)
        return 1
    return 0
