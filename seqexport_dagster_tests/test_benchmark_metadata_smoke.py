"""The metadata benchmark (issue 23) works end to end in its quick mode; no timing is asserted,
only that it measured both states of the same rows and that compaction kept every answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.postgres
@pytest.mark.slow
def test_metadata_benchmark_quick_mode(tmp_path: Path) -> None:
    out = tmp_path / "metadata.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.metadata_year", "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(out.read_text())
    before, after = r["before"], r["after"]
    # Compaction removed what was older than the horizon and wrote one summary per (export, dataset, day).
    assert r["maintain"]["days_compacted"] == r["deep_exports"] * (r["days"] - 14) * 4
    assert r["maintain"]["windows_removed"] > 0 and r["second_maintain"]["windows_removed"] == 0
    assert after["sizes"]["windows"]["rows"] < before["sizes"]["windows"]["rows"]
    assert after["sizes"]["window_days"]["rows"] >= r["maintain"]["summaries_written"]
    # The same answers before and after: history's runs, and verify --ledger clean.
    assert before["times"]["history_runs"] == after["times"]["history_runs"] > 0
    assert before["times"]["verify_ledger_problems"] == after["times"]["verify_ledger_problems"] == 0
    p = r["projection"]
    assert p["after_gb_2_years"] < p["before_gb_2_years"]
    assert set(before["times"]) == set(after["times"]) >= {"sensor_tick_queries_s", "status_s", "history_s"}
