"""The benchmark runner works end to end in a tiny mode; no timing is asserted, only that every
section measured the same rows and that the results file is complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.postgres
@pytest.mark.slow
def test_benchmark_runner_tiny_mode(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--rows", "3000", "--subscribers", "2000", "--ticks", "20",
         "--data-dir", str(tmp_path / "data"), "--results", str(results), "--scratch", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]

    raw = json.loads(results.with_suffix(".json").read_text())["raw"]
    meta = json.loads((tmp_path / "data" / "source_3000_2000.json").read_text())
    window_rows = meta["windows"]["3000"][1]
    assert window_rows == 3000
    engine = raw["engine: Runner.write_window -> local parts"]
    # Engine, floor and peers all handled exactly the window's rows.
    for name in (
        "floor: read + build + encode + compress",
        "DuckDB COPY ... (FORMAT JSON, COMPRESSION GZIP), 1 thread",
        "pandas read_sql + to_json(lines, gzip)",
        "PostgreSQL: SourceReader.window_batches only",
        "PostgreSQL: COPY (SELECT ...) TO STDOUT, unparsed",
        "engine: PostgreSQL -> local parts",
        "engine: SQLite -> S3 (moto server, PutObject)",
        "engine: 2 processes, half a window each",
    ):
        assert raw[name]["rows"] == window_rows, name
    # The floor compresses the same chunks the engine does, so it measures the same work; and the
    # same rows give the same bytes from SQLite and from PostgreSQL.
    assert engine["bytes"] == raw["floor: read + build + encode + compress"]["gzip_bytes"]
    assert raw["engine: PostgreSQL -> local parts"]["bytes"] == engine["bytes"]
    assert raw["engine: Runner.write_snapshot -> local parts"]["rows"] == 2000
    sizes = sorted(int(k) for k in meta["windows"])
    assert [raw[f"engine RSS: window of {meta['windows'][str(s)][1]:,} rows"]["rows"] for s in sizes] == [
        meta["windows"][str(s)][1] for s in sizes
    ]
    assert raw["tick_20"]["requests"] == 20

    text = results.read_text()
    for heading in ("# Benchmark results", "## Ratios", "## Measurements", "## Notes"):
        assert heading in text
    assert "engine vs DuckDB COPY" in text and "sensor tick at 20 exports" in text
    assert "Machine:" in text and "Date:" in text
