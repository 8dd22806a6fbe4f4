"""The benchmark runner works end to end in a tiny mode; no timing is asserted, only that every
section measured the same rows and that the results file is complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def kept_peers() -> dict[str, str]:
    """The environment of a benchmark whose peers' virtualenvs (DuckDB 1.5.5, APSW) are built once, in
    the user's cache folder, not in each run's scratch data (benchmarks/peers.py): building them cost
    about 11 CPU-s and a minute or two of pip on every run. Not under the checkout: the tests that
    read every ``*.py`` of ``benchmarks/`` would read the virtualenvs' site-packages too."""
    from benchmarks.peers import PEERS_VARIABLE

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {**os.environ, PEERS_VARIABLE: str(cache / "seqexport-bench-peers")}


@pytest.mark.postgres
@pytest.mark.slow
def test_benchmark_runner_tiny_mode(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--rows", "3000", "--subscribers", "2000", "--ticks", "20", "--daemon-ticks", "40",
         "--data-dir", str(tmp_path / "data"), "--results", str(results), "--scratch", "--quick", "--repeat", "2", "--compare-rounds", "1"],
        cwd=ROOT, env=kept_peers(), capture_output=True, text=True, timeout=900, check=False,  # ~100 s alone; 300 ran out under load
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]

    raw = json.loads(results.with_suffix(".json").read_text())["raw"]
    # Every section ran to its end (a failing one is recorded, and the exit status above is not 0).
    from benchmarks.run import SECTIONS

    assert raw["sections"] == dict.fromkeys(SECTIONS, "ran")
    compared = raw["compare"]["runs"]
    assert set(compared) == {"sqlite", "postgresql"}
    for source, tasks in compared.items():
        assert {name: [r["rows"] for r in runs] for name, runs in tasks.items()} == {
            name: [3000]
            for name in ("engine_jsonl", "engine_parquet", "duckdb_json", "duckdb_parquet", "floor", "pyarrow")
        }, source
    # The same rows give the same bytes from either source, in either format.
    assert compared["sqlite"]["engine_parquet"][0]["bytes"] == compared["postgresql"]["engine_parquet"][0]["bytes"]
    assert compared["sqlite"]["engine_jsonl"][0]["bytes"] == compared["postgresql"]["engine_jsonl"][0]["bytes"]
    meta = json.loads((tmp_path / "data" / "source_3000_2000.json").read_text())
    window_rows = meta["windows"]["3000"][1]
    assert window_rows == 3000
    engine = raw["engine: Runner.write_window -> local parts"]
    # Engine, floor and peers all handled exactly the window's rows.
    for name in (
        "floor: read + build + encode + compress, streamed",
        "DuckDB: ATTACH the SQLite file, COPY ... (FORMAT JSON, COMPRESSION GZIP), 1 thread",
        "DuckDB: COPY from its own table (rows preloaded, untimed), 1 thread",
        "gzip alone on the engine's JSON lines: isal level 1",
        "read alone: APSW, rows dropped (not used: a second SQLite)",
        "pandas read_sql + to_json(lines, gzip)",
        "PostgreSQL: SourceReader.window_batches only",
        "PostgreSQL: COPY (SELECT ...) TO STDOUT, unparsed",
        "engine: PostgreSQL -> local parts",
        "engine: SQLite -> S3 (moto server, PutObject)",
        "Parquet engine: Runner.write_window -> local .parquet parts",
        "DuckDB: ATTACH the SQLite file, COPY (FORMAT PARQUET, COMPRESSION ZSTD), 1 thread",
        "DuckDB: COPY (FORMAT PARQUET, ZSTD) from its own table, 1 thread",
        "pandas read_sql + to_parquet(pyarrow, zstd)",
        "JSONL engine on the same rows (gzip JSON Lines)",
    ):
        assert raw[name]["rows"] == window_rows, name
    # Engine, floor and DuckDB ran twice, interleaved; the table keeps the median run of each.
    assert len(engine["spread_rows_per_cpu_s"]) == 2
    assert set(raw["floor: read + build + encode + compress, streamed"]["phases"]) == {
        "read",
        "build",
        "encode",
        "compress",
    }
    # The floor compresses the same chunks the engine does, so it measures the same work; and the
    # same rows give the same bytes from SQLite and from PostgreSQL.
    assert engine["bytes"] == raw["floor: read + build + encode + compress, streamed"]["gzip_bytes"]
    assert raw["engine: PostgreSQL -> local parts"]["bytes"] == engine["bytes"]
    assert raw["engine: Runner.write_snapshot -> local parts"]["rows"] == 2000
    sizes = sorted(int(k) for k in meta["windows"])
    assert [raw[f"engine RSS: window of {meta['windows'][str(s)][1]:,} rows"]["rows"] for s in sizes] == [
        meta["windows"][str(s)][1] for s in sizes
    ]
    # Two exports at once, each half of the window (equal rows), in 2 pairs.
    two = raw["engine: 2 exports at once, half the window each (2 pairs summed)"]
    assert two["half_rows"] == [1500, 1500] and two["rows"] == 2 * window_rows
    # The gzip comparison compressed exactly the engine's bytes.
    assert raw["gzip alone on the engine's JSON lines: isal level 1"]["bytes"] == engine["bytes"]
    # Every export has work due; batched runs carry all 20 (fewer runs than exports).
    assert raw["tick_20"]["exports_requested"] == 20 and 1 <= raw["tick_20"]["requests"] <= 20

    text = results.read_text()
    for heading in ("# Benchmark results", "## Ratios", "## Measurements", "## Notes"):
        assert heading in text
    assert "engine vs DuckDB reading the same SQLite file" in text and "sensor tick at 20 exports" in text
    assert "Machine:" in text and "Date:" in text
    assert "Parquet engine vs DuckDB reading the same SQLite file" in text


def test_profile_categories_split_the_engine_by_step() -> None:
    """py-spy stacks (root first) land in the step whose frame they are under; GC anywhere wins."""
    from benchmarks.profile import FLOOR_CATEGORIES, OTHER, classify

    loop = ["<module> (benchmarks/child.py:1)", "Runner.write_window (seqexport_dagster/delivery/runner.py:1)",
            "PartWriter.parts (seqexport_dagster/delivery/writer.py:1)"]  # fmt: skip
    fetch = [*loop, "SourceReader._stream (reader.py:1)", "pysqlite_cursor_fetchmany (_sqlite3.so)"]
    assert classify([*fetch, "_pysqlite_fetch_one_row (_sqlite3.so)", "sqlite3_column_text (libsqlite3.so.0)"]) == (
        "sqlite3 module: row tuples (column access, UTF-8 decode)"
    )
    assert classify([*fetch, "stmt_step (_sqlite3.so)", "sqlite3_step (libsqlite3.so.0)", "pread64 (libc.so.6)"]) == (
        "SQLite: running the query (B-tree walk, page reads)"
    )
    assert classify([*loop, "0x7f00 (isal/isal_zlib.cpython-311-x86_64-linux-gnu.so)"]) == "gzip: isal deflate level 1"
    assert classify([*loop, "JSONEncoder_encode_lines (msgspec/_core.so)", "gc_collect_main (libpython)"]) == (
        "garbage collector"
    )
    put = ["Runner.write_window (runner.py:1)", "_Attempt.put (runner.py:1)", "LocalDestination.put (local.py:1)"]
    assert classify(put) not in FLOOR_CATEGORIES
    assert classify(["Runner.write_window (runner.py:1)", "part_key (window.py:1)"]) == OTHER


@pytest.mark.postgres
@pytest.mark.slow
def test_http_api_benchmark_tiny_mode() -> None:
    """benchmarks/http_api.py runs end to end (a real server on PostgreSQL); no timing is asserted."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.http_api", "--exports", "30", "--seconds", "0.4", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,  # ~100 s alone; 300 ran out under load
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    raw = json.loads(out.stdout[out.stdout.index("{") :])
    assert raw["exports"] == 30
    assert set(raw["results"]) == {"status: HTTP", "status: Python API", "list: HTTP", "list: Python API"}
    assert all(r["requests"] >= 40 and r["p99_ms"] >= r["p50_ms"] > 0 for r in raw["results"].values())
    assert "status: Python API / HTTP throughput" in out.stdout


@pytest.mark.slow
def test_engine_revs_compares_parquet_windows_and_their_peak_memory(tmp_path: Path) -> None:
    """benchmarks/engine_revs.py with the options issue 46's third pass used: a window picked from the
    generated day, Parquet, peak RSS per tree. A revision against this tree writes the same bytes."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine_revs", "--before-rev", "HEAD", "--rows", "2000", "--subscribers",
         "500", "--window", "2000", "--format", "parquet", "--rounds", "1", "--no-floor",
         "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    raw = json.loads(out.stdout[out.stdout.index("{") :])
    assert (raw["format"], raw["source"], raw["rows"]) == ("parquet", "sqlite", 2000)
    assert raw["bytes"]["before"] == raw["bytes"]["after"] and raw["bytes"]["after"][0] > 0
    assert all(raw["peak_rss_mb"][tree][0] > 0 for tree in ("before", "after"))


@pytest.mark.postgres
@pytest.mark.slow
def test_pg_windows_reads_the_same_windows_with_and_without_reused_connections(tmp_path: Path) -> None:
    from benchmarks import data

    src = data.ensure_source(2000, 500, tmp_path / "data")
    name = f"seqexport_bench_smoke_{tmp_path.name[-8:].lower().replace('-', '_')}"
    url = data.ensure_postgres(src, 2000, name)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.pg_windows", "--url", url, "--window-s", "600", "--windows", "2",
             "--rounds", "1"],
            cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    finally:
        data.drop_postgres(name)
    assert out.returncode == 0, out.stderr[-3000:]
    raw = json.loads(out.stdout)
    assert raw["fresh"]["rows_per_window"] == raw["reuse"]["rows_per_window"] > 0
    assert all(raw[mode]["cpu_ms_per_window"][0] > 0 for mode in ("fresh", "reuse"))
