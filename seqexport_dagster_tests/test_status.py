"""Behind is per event dataset; the daily snapshot's lateness is its own field (issue 25, item 2).

Each case goes through the real CLI (``--json`` is the HTTP API's shape, `presentation.status_json`;
the ``run`` fixture's ``remote`` leg sends it through the HTTP API) and through the Dagster status
view's metadata, which reads the same values (`seqexport_dagster.management.health`).
"""

from __future__ import annotations

from typing import Any

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of, iso_ms
from seqexport_dagster.defs.health import status_metadata
from seqexport_dagster.errors import DestinationError
from seqexport_dagster.management.presentation import status_from_json, status_json
from seqexport_dagster.management.status import export_status
from seqexport_dagster_tests.support.cli_harness import Cli, run_fixture, run_sqlite_fixture  # noqa: F401 - fixtures
from seqexport_dagster_tests.support.world import DAY0

LAG = 2 * MINUTE_MS


def meta_of(run: Cli, export_id: str) -> dict[str, Any]:
    return status_metadata(run.world.store.get_export(export_id), run.world.clock())


def test_a_brand_new_healthy_export_is_not_behind_by_its_snapshot(run: Cli) -> None:
    """Created at 16:56: its snapshot position is that day's midnight, which once read as 16 h 56 m behind."""
    w = run.world
    created = w.clock.now_ms = DAY0 + 16 * HOUR_MS + 56 * MINUTE_MS
    eid = run.create_local("b")["id"]
    w.clock.advance(30 * MINUTE_MS)
    body = run.ok("status", eid)
    by_name = {d["dataset"]: d for d in body["datasets"]}
    for name in ("email_events", "sms_events", "custom_events"):
        assert by_name[name]["behind_ms"] == 30 * MINUTE_MS and by_name[name]["snapshot_late_ms"] is None
        assert by_name[name]["position_ms"] == created
    snapshot = by_name["subscribers"]
    assert snapshot["position_ms"] == DAY0 and snapshot["behind_ms"] is None and snapshot["snapshot_late_ms"] == 0
    assert (
        snapshot["snapshot_due_at"] == iso_ms(DAY0 + DAY_MS + LAG) and by_name["sms_events"]["snapshot_due_at"] is None
    )
    assert body["behind_ms"] == 30 * MINUTE_MS and body["snapshot_late_ms"] == 0

    text = run("status", eid).out
    assert "16h" not in text and "30m 00s" in text
    assert f"subscribers snapshot of {iso_ms(DAY0)[:10]}: due {iso_ms(DAY0 + DAY_MS + LAG)[:19].replace('T', ' ')}Z, on time" in text  # fmt: skip

    meta = meta_of(run, eid)
    assert meta["behind_minutes"] == 30 and meta["snapshot_late_minutes"] == 0
    assert meta["position"] == iso_ms(created) and meta["health"] == "ok"

    # Past its day's end + lag with no snapshot written, the snapshot is late, and says by how much.
    w.clock.now_ms = DAY0 + DAY_MS + LAG + 3 * HOUR_MS
    body = run.ok("status", eid)
    assert body["snapshot_late_ms"] == 3 * HOUR_MS
    assert "late by 3h 00m" in run("status", eid).out
    assert meta_of(run, eid)["snapshot_late_minutes"] == 180


def test_a_failing_export_shows_where_its_event_datasets_are_stuck(run_sqlite: Cli) -> None:
    run = run_sqlite
    w = run.world
    stuck_at = w.clock.now_ms = DAY0 + 5 * HOUR_MS
    (w.root / "blocked").write_text("a file where the bucket folder should be")
    export = w.local_export(account_id="globex", datasets=("email_events", "subscribers"), folder="blocked")
    w.clock.now_ms = DAY0 + 8 * HOUR_MS + LAG
    with pytest.raises(DestinationError, match="cannot write"):
        w.runner().run_day(export.id, "email_events", day_of(stuck_at))
    body = run.ok("status", export.id)
    email = next(d for d in body["datasets"] if d["dataset"] == "email_events")
    assert email["position_ms"] == stuck_at and email["last_error"] is not None
    assert body["behind_ms"] == 3 * HOUR_MS + LAG and body["snapshot_late_ms"] == 0

    meta = meta_of(run, export.id)
    assert meta["health"] == "failing" and meta["account"] == "globex"
    assert meta["position"] == iso_ms(stuck_at), "the stuck event dataset, not the snapshot's 00:00"
    assert meta["behind_minutes"] == 182 and meta["snapshot_late_minutes"] == 0


def test_a_deleted_export_shows_no_behind(run_sqlite: Cli) -> None:
    run = run_sqlite
    w = run.world
    eid = run.create_local("b")["id"]
    w.clock.advance(3 * HOUR_MS)
    run.ok("delete", eid, "--yes")
    for _ in range(2):
        body = run.ok("status", eid)
        assert body["behind_ms"] is None and body["snapshot_late_ms"] is None
        assert all(d["behind_ms"] is None and d["snapshot_late_ms"] is None for d in body["datasets"])
        text = run("status", eid).out
        rows = text.split("\n\n")[1].splitlines()[1:]
        assert [r.split()[3] for r in rows] == ["-"] * 4, text  # BEHIND, after the date and the time
        assert "snapshot of" not in text
        meta = meta_of(run, eid)
        assert meta["behind_minutes"] == "-" and meta["snapshot_late_minutes"] == "-"
        w.clock.advance(5 * DAY_MS)


def test_the_remote_cli_rebuilds_both_delays_from_the_json() -> None:
    """`status_from_json` is the inverse of `status_json` for both fields, nulls included."""
    from seqexport_dagster.store import DatasetState, ExportRecord

    states = (
        DatasetState(dataset="email_events", added_at=DAY0, position_ms=DAY0 + HOUR_MS),
        DatasetState(dataset="subscribers", added_at=DAY0, position_ms=DAY0),
    )
    record = ExportRecord(
        id="exp_0123456789abcdef", account_id="acme", provider="local", bucket="/b", region=None, endpoint=None,
        prefix="", access_key_id=None, frequency="1h", lag_ms=LAG, status="active", config_version=1,
        destination_version=1, export_now_at=None, created_at=DAY0, updated_at=DAY0, deleted_at=None, datasets=states,
    )  # fmt: skip
    for status in (export_status(record, DAY0 + 2 * DAY_MS), export_status(record, DAY0 + HOUR_MS)):
        back = status_from_json(status_json(status))
        assert back.datasets == status.datasets
        assert (back.behind_ms, back.snapshot_late_ms) == (status.behind_ms, status.snapshot_late_ms)
    late = export_status(record, DAY0 + 2 * DAY_MS)
    assert late.behind_ms == 2 * DAY_MS - HOUR_MS and late.snapshot_late_ms == DAY_MS - LAG
