"""`seqexport backfill --export ID --from D --to D`: re-delivery for chosen exports, bounded, never before a start."""

from __future__ import annotations

import datetime as dt

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.store import COMMITTED
from seqexport_dagster_tests.support.cli_harness import Cli, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.local_bucket import bucket_rows
from seqexport_dagster_tests.support.world import DAY0


def test_backfill_redelivers_chosen_exports_and_never_writes_before_their_start(run_sqlite: Cli) -> None:
    w = run_sqlite.world
    generate_account(w.source_engine, "acme", DAY0 - DAY_MS, DAY0 + DAY_MS, scale=Scale(30, 20, 3, 5))
    start = DAY0 + 5 * HOUR_MS
    w.clock.now_ms = start
    chosen = w.local_export(datasets=("email_events",), folder="chosen")
    other = w.local_export(datasets=("email_events",), folder="other")
    w.clock.now_ms = DAY0 + 8 * HOUR_MS + 5 * 60_000
    w.runner().run_day(chosen.id, "email_events", dt.date(2026, 9, 30))
    before = sorted({x.window for x in w.store.ledger(chosen.id) if x.status == COMMITTED})

    report = run_sqlite.ok("backfill", "--export", chosen.id, "--from", "2026-09-29", "--to", "2026-09-30")
    (outcome,) = report["exports"]
    assert outcome["export_id"] == chosen.id and outcome["status"] == "done"
    # The day before the export existed: nothing; the committed windows came again with their bounds.
    windows = sorted({x.window for x in w.store.ledger(chosen.id) if x.status == COMMITTED})
    assert windows[: len(before)] == before and all(x.from_ms >= start for x in windows)
    assert not (w.root / "chosen" / "email_events" / "date=2026-09-29").exists()
    rows = bucket_rows(w.root / "chosen", "email_events")
    assert len(rows) == len({r["id"] for r in rows}) > 0
    assert w.store.ledger(other.id) == [], "an export not named is left alone"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--from", "2026-13-01", "--to", "2026-09-30"], "from"),
        (["--from", "2026-09-30", "--to", "2026-09-29"], "to"),
        (["--from", "2024-01-01", "--to", "2026-09-30"], "to"),
        (["--from", "2026-09-30", "--to", "2999-01-01"], "to"),
        (["--from", "2026-09-30", "--to", "2026-09-30", "--datasets", "emails"], "datasets"),
    ],
)
def test_bad_backfill_input_is_one_clear_error_with_exit_2(run_sqlite: Cli, argv: list[str], field: str) -> None:
    export = run_sqlite.world.local_export(datasets=("email_events",))
    result = run_sqlite("backfill", "--json", "--export", export.id, *argv)
    assert result.code == 2, result
    error = result.json["error"]
    assert error["field"] == field and "Traceback" not in result.err + result.out


def test_backfill_of_an_unknown_export_is_not_found(run_sqlite: Cli) -> None:
    result = run_sqlite("backfill", "--export", "exp_nope", "--from", "2026-09-30", "--to", "2026-09-30")
    assert result.code == 3 and "exp_nope" in result.err + result.out
