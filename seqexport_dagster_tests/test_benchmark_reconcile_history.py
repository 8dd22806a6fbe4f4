"""The reconciliation benchmark's bulk history (issue 29) holds what the real runner writes.

Two exports on identical source rows: one's history is built by the runner, another's copied from
a third's; they must match field by field, before and after a scheduled hour run on all of them.
No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchmarks import reconcile_cost, reconcile_history
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster_tests.support.world import sqlite_world

ROOT = Path(__file__).resolve().parent.parent
HISTORY = 8  # quarter-hours


def test_copied_history_equals_the_runners(tmp_path: Path) -> None:
    with sqlite_world(tmp_path, reconcile_cost.DAY0) as world:
        real, copied = reconcile_cost.build_world(world, 4, HISTORY)
        assert len(real) == 2 and len(copied) == 2
        twin, copy = real[1], copied[0]
        rows = reconcile_history.rows_of(world, copy)
        assert len(rows["windows"]) == HISTORY * len(reconcile_cost.DATASETS)
        assert rows["parts"] and all(r for r in rows["parts"])
        assert reconcile_history.differences(world, twin, copy) == []
        # The copy's ledger answers as the runner's does: every window checked, nothing late.
        world.clock.now_ms = reconcile_cost.DAY0 + HISTORY * reconcile_cost.STEP + reconcile_cost.LAG
        for export_id in (twin, copy):
            checked = reconcile(world.runner(), export_id, lateness_ms=reconcile_cost.LATENESS,
                                datasets=reconcile_cost.DATASETS)  # fmt: skip
            assert len(checked) == HISTORY * len(reconcile_cost.DATASETS)
            assert not any(r.changed for r in checked)
        # A row the copy got wrong is found.
        with world.control_engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE parts SET rows = rows + 1 WHERE id = (SELECT max(id) FROM parts WHERE export_id = :e)"),
                {"e": copy},
            )
        assert any(d.startswith("parts[") for d in reconcile_history.differences(world, twin, copy))


@pytest.mark.postgres
def test_reconcile_benchmark_tiny_on_postgres() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.reconcile_cost", "--exports", "4", "--history", str(HISTORY),
         "--postgres", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert (r["exports_by_runner"], r["exports_copied"], r["windows"]) == (2, 2, 4 * 2 * 4)
    assert r["copy_differences"] == []
    assert r["after_cpu_s_per_window"] > r["write_cpu_s_per_window"] > 0
