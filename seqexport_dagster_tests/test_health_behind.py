"""Issue 42: "behind" per dataset, never older than a stated bound without saying how old, within
the event-log budget (pure; `seqexport_dagster.management.health`, `defs.sensors.status_events`).

The scheduler sensor records an export's status when its health or a dataset's band changes. On
schedule (at most frequency + lag + `SLACK_MS` behind) nothing is recorded, so a healthy fleet
costs no event at all; off schedule, a value is recorded when the delay doubles or the position
moves. Every value says when it was taken.
"""

from __future__ import annotations

import dataclasses

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.defs.sensors import Cursor, status_events, status_key
from seqexport_dagster.management.health import SLACK_MS, behind_band, datasets_behind
from seqexport_dagster.store import DatasetState, ExportRecord
from seqexport_dagster_tests.support.world import DAY0

TICK_MS = 30_000


def export(i: int, position_ms: int, failures: int = 0) -> ExportRecord:
    return ExportRecord(
        id=f"exp_{i:06d}", account_id=f"acct{i % 97}", provider="local", bucket="b", region=None, endpoint=None,
        prefix="", access_key_id=None, frequency="15m", lag_ms=MINUTE_MS, status="active", config_version=1,
        destination_version=1, export_now_at=None, created_at=DAY0, updated_at=DAY0, deleted_at=None,
        datasets=(DatasetState("email_events", DAY0, position_ms, failures=failures,
                               last_error="no such bucket" if failures else None),),
    )  # fmt: skip


def test_a_punctual_fleet_records_nothing_and_its_shown_value_holds_within_the_bound() -> None:
    """Exports at 15 minutes delivered on time all day: no status event from the sensor, whatever
    their number (the 6-hourly refresh runs are the only ones: 12,000 a day at 3,000 exports,
    already in the budget of docs/performance.md)."""
    fleet = [export(i, DAY0) for i in range(50)]
    cursor = Cursor()
    recorded = 0
    for tick in range(0, DAY_MS, 10 * TICK_MS):  # every tenth tick: a band lasts minutes
        now = DAY0 + tick
        # Each window is delivered at its end + lag + up to 4 minutes of run.
        position = (now - MINUTE_MS - 4 * MINUTE_MS) // (15 * MINUTE_MS) * 15 * MINUTE_MS
        fleet = [dataclasses.replace(e, datasets=(dataclasses.replace(e.datasets[0], position_ms=max(DAY0, position)),))
                 for e in fleet]  # fmt: skip
        events, runs, _ = status_events(fleet, cursor, now, new=set(), changed=set())
        recorded += len(events) + len(runs)
        for e in fleet:
            (b,) = datasets_behind(e, now)
            assert b.band == "" and "on schedule (updated past 31 min)" in b.text
    assert recorded == 0


def test_a_stuck_export_is_recorded_as_its_delay_doubles_and_each_value_says_when() -> None:
    stuck = export(1, DAY0, failures=1)
    keys = [status_key(stuck, DAY0 + t) for t in range(0, DAY_MS, TICK_MS)]
    changes = sum(1 for a, b in zip(keys, keys[1:], strict=False) if a != b)
    # On schedule until 31 min, then 31+15, +30, +60, ... : 7 changes in a day, not 2,880 ticks.
    assert changes == 7, changes
    (b,) = datasets_behind(stuck, DAY0 + 5 * HOUR_MS)
    assert b.text == (
        "failing (attempt 1); 5 h 00 min behind at 05:00Z (updated as it doubles); delivered through 2026-09-30T00:00Z"
    )
    # Between two records the delay shown is exact at its time, and the position exact until it moves.
    assert behind_band(stuck, DAY0 + 2 * HOUR_MS) == behind_band(stuck, DAY0 + 2 * HOUR_MS + SLACK_MS)
    # It catches up: a moved position is a change, and back on schedule records once more.
    caught_up = dataclasses.replace(stuck, datasets=(DatasetState("email_events", DAY0, DAY0 + 5 * HOUR_MS),))
    assert behind_band(caught_up, DAY0 + 5 * HOUR_MS + 10 * MINUTE_MS) == ""
