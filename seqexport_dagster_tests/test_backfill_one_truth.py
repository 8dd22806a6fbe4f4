"""Issue 42: a Dagster backfill's log, observation and day cell say the same thing, and a backfill
tagged ``seqexport/redeliver=true`` puts back what the bucket lost, create-only.

Before, a UI backfill of a complete day logged "0 rows", observed ``windows 0`` and materialized
``rows 885, redelivered true``, and wrote nothing although the bucket had lost a file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"
DATASET = "email_events"


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(20, 10, 1, 2))
        yield value


def _said(h: Harness, result: dg.ExecuteInProcessResult) -> tuple[str, str, str]:
    """The backfill sentence as the run's log, its observation and the day cell's materialization hold it."""
    logs = [e.user_message for e in h.instance.all_logs(result.run_id) if e.user_message.startswith(f"{DATASET}: ")]
    (log,) = [m.removeprefix(f"{DATASET}: ") for m in logs if "backfill sent" in m]
    (obs,) = [o for o in h.observations(DATASET) if o.run_id == result.run_id]
    (mat,) = [m for m in h.materializations(DATASET) if m.run_id == result.run_id]
    observed = obs.asset_observation.metadata["backfill"].value
    materialized = mat.asset_materialization.metadata["backfill"].value
    return log, observed, materialized


def test_a_backfill_says_one_thing_and_redeliver_puts_back_what_the_bucket_lost(h: Harness) -> None:
    export = h.world.local_export(datasets=(DATASET,), frequency="6h")
    h.world.clock.now_ms = DAY0 + DAY_MS + 5 * MINUTE_MS
    assert h.world.runner(part_limit=50).run_day(export.id, DATASET, dt.date(2026, 9, 30)).complete
    parts = sorted((h.world.root / "bucket" / DATASET / f"date={D0}").glob("*.jsonl.gz"))
    assert len(parts) > 1, sorted(str(p) for p in h.world.root.rglob("*.gz"))
    lost = parts[1]
    kept = {p: p.stat().st_mtime_ns for p in parts if p != lost}
    body = lost.read_bytes()
    lost.unlink()

    plain = h.run([export.id], D0, [DATASET], tags={"dagster/backfill": "plain"})
    assert plain.success
    said = _said(h, plain)
    assert len(set(said)) == 1, said
    assert said[0].startswith("backfill sent 0 files") and "seqexport/redeliver=true" in said[0]
    assert not lost.exists()

    fixed = h.run([export.id], D0, [DATASET], tags={"dagster/backfill": "again", "seqexport/redeliver": "true"})
    assert fixed.success
    said = _said(h, fixed)
    assert len(set(said)) == 1, said
    assert said[0] == f"backfill sent 1 files; {len(parts) - 1} files already in the bucket"
    assert lost.read_bytes() == body
    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "a file still there is never rewritten"
