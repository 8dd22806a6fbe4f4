"""The simulator's budget mode (`support/sim/budget.py`, ``make sim-long``): seeds in worker
processes run exactly the histories ``--seed`` runs, the budget of export-days stops the run, and
the totals name rows lost, duplicated and objects replaced (zeros included) and every failing
seed's reproducing command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from seqexport_dagster_tests.support.sim.budget import found_counts, run_seeds, totals
from seqexport_dagster_tests.support.sim.oracles import Violation
from seqexport_dagster_tests.support.sim.run import SimResult, simulate

#: Small quiet worlds: about a CPU-second a seed.
SMALL = {"exports": 2, "level": 0.0, "frequencies": ("1h",)}


def _history(r: SimResult) -> tuple[object, ...]:
    return (r.seed, r.rows, r.rows_checked, r.runs, r.crashes, r.ops, r.faults, r.formats, r.export_days)


def test_seeds_in_worker_processes_run_the_histories_of_their_seed(tmp_path: Path) -> None:
    results, wall_s, cpu_all_s = run_seeds(
        31, days=0.25, world_kw=SMALL, jobs=2, export_days=0.8, say=lambda _line: None
    )
    assert [r.seed for r in results] == list(range(31, 31 + len(results))) and len(results) >= 2
    assert sum(r.export_days for r in results) >= 0.8  # ran until the budget, then stopped
    assert wall_s > 0 and cpu_all_s >= sum(r.cpu_s for r in results) * 0.5
    for r in results[:2]:
        (tmp_path / str(r.seed)).mkdir()
        alone = simulate(r.seed, tmp_path / str(r.seed), days=0.25, **SMALL)  # type: ignore[arg-type]
        assert _history(r) == _history(alone)
        assert r.ok, r.summary()


def test_totals_count_lost_duplicated_and_replaced_and_name_failing_seeds() -> None:
    ok = SimResult(1, 1.0, export_days=2.0, rows=10, rows_checked=8, cpu_s=1.0, command="cmd 1")
    assert "rows lost 0, rows duplicated 0, objects replaced 0" in totals([ok])
    bad = SimResult(2, 1.0, export_days=1.0, cpu_s=1.0, command="PYTHONPATH=. python -m x --seed 2")
    bad.violations = [
        Violation("row lost", "e1", "snowpipe: email_events r1 never loaded", "r1"),
        Violation("row lost", "e1", "window loader: email_events r1 never loaded", "r1"),  # the same row
        Violation("row loaded twice", "e2", "snowpipe: sms_events r2 from a, b", "r2"),
        Violation("object", "-", "ord-b1: object k was replaced by a different body"),
        Violation("late beyond bound", "e1", "email_events r3 visible ...: delivered 90 min after", "r3"),
    ]
    assert found_counts([ok, bad]) == {
        "rows lost": 1,
        "rows duplicated": 1,
        "objects replaced": 1,
        "unconditional PUTs on existing create-only keys": 0,
        "late rows beyond the bound": 1,
    }
    text = totals([ok, bad], wall_s=3.0, cpu_all_s=2.5)
    assert "2 seeds (seeds 1..2), 3 export-days in 2 CPU-s" in text
    assert "failing seed 2: PYTHONPATH=. python -m x --seed 2" in text
    assert "late rows timed against the bound: 0" in text


def test_the_command_line_runs_an_export_day_budget_in_two_processes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "seqexport_dagster_tests.support.sim", "--export-days", "0.5", "--jobs", "2",
         "--days", "0.25", "--exports", "2", "--level", "0", "--frequencies", "1h", "--first-seed", "51"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rows lost 0, rows duplicated 0, objects replaced 0" in out.stdout, out.stdout
    assert "seed 51:" in out.stdout and "export-days per CPU-second" in out.stdout
