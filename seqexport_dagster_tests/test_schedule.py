"""The pure scheduling policy: which (export, day, datasets) runs are due, with which run key."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from seqexport_dagster.schedule import due_work, work_for
from seqexport_dagster.store.store import DatasetState, ExportRecord
from seqexport_dagster.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster_tests.world import DAY0

D0 = dt.date(2026, 9, 30)
D1 = dt.date(2026, 10, 1)


def export(*states: DatasetState, frequency: str = "1h", lag_ms: int = 2 * MINUTE_MS, **kw) -> ExportRecord:
    values = dict(
        id="exp_1",
        account_id="acme",
        provider="local",
        bucket="/b",
        region=None,
        endpoint=None,
        prefix="",
        access_key_id=None,
        frequency=frequency,
        lag_ms=lag_ms,
        status="active",
        config_version=1,
        destination_version=1,
        export_now_at=None,
        created_at=DAY0,
        updated_at=DAY0,
        deleted_at=None,
        datasets=states,
    )
    values.update(kw)
    return ExportRecord(**values)


def ds(name: str, position: int, **kw) -> DatasetState:
    return DatasetState(dataset=name, added_at=kw.pop("added_at", position), position_ms=position, **kw)


def test_a_window_is_due_only_after_its_end_plus_lag():
    e = export(ds("email_events", DAY0))
    assert work_for(e, DAY0 + HOUR_MS + 2 * MINUTE_MS - 1) is None
    item = work_for(e, DAY0 + HOUR_MS + 2 * MINUTE_MS)
    assert item is not None and item.day == D0 and item.datasets == ("email_events",)


def test_snapshot_is_due_after_the_day_ends_plus_lag():
    e = export(ds("subscribers", DAY0), lag_ms=5 * MINUTE_MS)
    assert work_for(e, DAY0 + DAY_MS + 5 * MINUTE_MS - 1) is None
    assert work_for(e, DAY0 + DAY_MS + 5 * MINUTE_MS).datasets == ("subscribers",)


def test_datasets_are_grouped_by_their_earliest_due_day():
    e = export(ds("email_events", DAY0 + 23 * HOUR_MS), ds("sms_events", DAY0 + DAY_MS), ds("subscribers", DAY0))
    item = work_for(e, DAY0 + DAY_MS + 3 * HOUR_MS)
    assert item.day == D0 and item.datasets == ("email_events", "subscribers")
    moved = export(ds("email_events", DAY0 + DAY_MS), ds("sms_events", DAY0 + DAY_MS), ds("subscribers", DAY0 + DAY_MS))
    item = work_for(moved, DAY0 + DAY_MS + 3 * HOUR_MS)
    assert item.day == D1 and item.datasets == ("email_events", "sms_events")


def test_backoff_waits_and_export_now_skips_it():
    failed = ds("email_events", DAY0, failures=3, next_retry_at=DAY0 + 5 * HOUR_MS)
    e = export(failed, ds("sms_events", DAY0))
    # The failing dataset waits; the healthy one is not blocked by it.
    assert work_for(e, DAY0 + 4 * HOUR_MS).datasets == ("sms_events",)
    assert work_for(e, DAY0 + 5 * HOUR_MS).datasets == ("email_events", "sms_events")
    now = DAY0 + 4 * HOUR_MS
    item = work_for(replace(e, export_now_at=now), now)
    assert item.datasets == ("email_events", "sms_events") and item.export_now


def test_export_now_makes_a_partial_window_due():
    e = export(ds("email_events", DAY0))
    assert work_for(e, DAY0 + 40 * MINUTE_MS) is None
    assert work_for(replace(e, export_now_at=DAY0 + 40 * MINUTE_MS), DAY0 + 40 * MINUTE_MS).export_now


def test_paused_deleted_and_busy_exports_get_nothing():
    e = export(ds("email_events", DAY0))
    now = DAY0 + 3 * HOUR_MS
    assert work_for(replace(e, status="paused"), now) is None
    assert work_for(replace(e, status="deleted"), now) is None
    other = replace(e, id="exp_2")
    assert [w.export_id for w in due_work([e, other], now, busy={"exp_1"})] == ["exp_2"]


def test_run_key_moves_with_the_work_and_only_with_it():
    e = export(ds("email_events", DAY0))
    now = DAY0 + 3 * HOUR_MS
    key = work_for(e, now).run_key
    assert work_for(e, now + MINUTE_MS).run_key == key  # same work, same key: never launched twice
    assert work_for(export(ds("email_events", DAY0 + HOUR_MS)), now).run_key != key  # position moved
    assert work_for(export(ds("email_events", DAY0, failures=1)), now).run_key != key  # a failure
    assert work_for(replace(e, config_version=2), now).run_key != key  # paused and resumed
    assert work_for(e, now + 15 * MINUTE_MS).run_key != key  # a run that died without progress is retried
    assert "secret" not in key and key.startswith("exp_1|2026-09-30|")
