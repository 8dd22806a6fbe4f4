"""The one planner, pure: due work, the unfinished-window retry, backfill windows, batching, completeness."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.delivery.planner import (
    batch,
    complete_through,
    dataset_complete_through,
    day_windows,
    due_work,
    windows_due,
    work_for,
)
from seqexport_dagster.store import DatasetState, ExportRecord
from seqexport_dagster_tests.support.world import DAY0

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
    # Export now: the store lifts the wait (`request_export_now`), once.
    pressed = replace(e, export_now_at=now, datasets=(replace(failed, next_retry_at=None), ds("sms_events", DAY0)))
    item = work_for(pressed, now)
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


def test_the_unfinished_window_is_due_with_its_own_bounds_for_sensor_and_run_alike():
    # An "export now" attempt (position, 00:38] failed; export now was then settled by a resume.
    e = export(ds("email_events", DAY0))
    unfinished = Window(DAY0, DAY0 + 38 * MINUTE_MS)
    now = DAY0 + 50 * MINUTE_MS  # the grid's 01:00 is not due yet
    assert windows_due(e, e.datasets[0], now, None) == []
    assert windows_due(e, e.datasets[0], now, unfinished) == [unfinished]
    # The sensor plans with the same input, so it requests exactly what the run will write.
    item = work_for(e, now, {("exp_1", "email_events"): unfinished})
    assert item is not None and item.day == D0
    assert work_for(e, now) is None


def test_a_backfill_never_writes_before_the_datasets_start():
    start = DAY0 + 5 * HOUR_MS + 30 * MINUTE_MS
    e = export(ds("email_events", DAY0 + 7 * HOUR_MS, added_at=start))
    now = DAY0 + 7 * HOUR_MS + 5 * MINUTE_MS
    # The day before the export existed: nothing, whatever was asked.
    assert day_windows(e, e.datasets[0], D0 - dt.timedelta(days=1), now, committed=[]) == []
    # Its first day: what was committed (re-delivered), then what is due; nothing before 05:30.
    committed = [Window(start, DAY0 + 6 * HOUR_MS), Window(DAY0 + 6 * HOUR_MS, DAY0 + 7 * HOUR_MS)]
    rewrite = day_windows(e, e.datasets[0], D0, now, committed=[Window(DAY0, start), *committed])
    assert rewrite == committed


def test_a_backfill_of_a_later_day_never_writes_ahead_of_the_position():
    """Sim seed 10000855: the position waits out a backoff at 22:00 on D0; a backfill of D1 took
    D1's due windows, committing (00:00, 04:00] ahead of it, and the scheduler, resuming from 22:00,
    later cut (00:00, 08:00] over them. A day's due windows are the chain's next ones, or none."""
    failing = ds(
        "email_events", DAY0 + 22 * HOUR_MS, added_at=DAY0, failures=2, next_retry_at=DAY0 + DAY_MS + 8 * HOUR_MS
    )
    e = export(failing)
    now = DAY0 + DAY_MS + 4 * HOUR_MS + 57 * MINUTE_MS
    assert day_windows(e, failing, D1, now, committed=[]) == [], "D1 waits for the chain to reach it"
    behind = day_windows(e, failing, D0, now, committed=[])
    assert behind and behind[0].from_ms == DAY0 + 22 * HOUR_MS, "the position's own day continues the chain"
    caught_up = replace(failing, position_ms=DAY0 + DAY_MS, failures=0, next_retry_at=None)
    ahead = day_windows(export(caught_up), caught_up, D1, now, committed=[])
    assert ahead and ahead[0].from_ms == DAY0 + DAY_MS and ahead[-1].to_ms <= DAY0 + DAY_MS + 5 * HOUR_MS


def test_batches_group_by_day_and_close_at_k_exports_or_weight():
    now = DAY0 + 3 * HOUR_MS + 2 * MINUTE_MS
    punctual = [export(ds("email_events", DAY0 + 2 * HOUR_MS), id=f"exp_{i:04d}") for i in range(300)]
    items = due_work(punctual, now)
    assert len(items) == 300 and all(abs(i.weight - 1 / 24) < 1e-9 for i in items)
    runs = batch(items, max_exports=50, shards=4)
    assert sum(len(b.items) for b in runs) == 300 and all(len(b.items) <= 50 for b in runs)
    assert len(runs) == 300 // 50, "N punctual exports make ceil(N / K) runs"
    assert len({b.run_key for b in runs}) == len(runs)
    assert batch(items, max_exports=50, shards=4) == runs, "the same work makes the same runs"
    # A catch-up export (a whole day due) weighs 1; with a weight cap of 1.5, it shares with few.
    behind = export(ds("email_events", DAY0), id="exp_zzzz")
    heavy = work_for(behind, DAY0 + DAY_MS + 3 * HOUR_MS)
    assert heavy is not None and heavy.weight == 1.0
    light = [
        work_for(export(ds("email_events", DAY0 + 20 * HOUR_MS), id=f"exp_{i}"), DAY0 + 23 * HOUR_MS) for i in range(30)
    ]
    runs = batch([heavy, *light], max_weight=1.5, shards=1)
    (with_heavy,) = [b for b in runs if "exp_zzzz" in b.export_ids]
    assert sum(i.weight for i in with_heavy.items) <= 1.5


def test_a_day_is_complete_when_every_active_export_finished_it():
    done = export(ds("email_events", DAY0 + DAY_MS), id="exp_a")
    late = export(ds("email_events", DAY0 + 20 * HOUR_MS), id="exp_b")
    newer = export(ds("email_events", DAY0 + DAY_MS + 3 * HOUR_MS, added_at=DAY0 + DAY_MS + 3 * HOUR_MS), id="exp_c")
    assert complete_through(done.datasets[0]) == D0
    assert complete_through(late.datasets[0]) == D0 - dt.timedelta(days=1)
    assert dataset_complete_through([done, late, newer], "email_events") == D0 - dt.timedelta(days=1)
    # The newer export started on D1: D0 does not wait for it; a paused export holds nothing back.
    assert dataset_complete_through([done, newer], "email_events") == D0
    assert dataset_complete_through([done, replace(late, status="paused")], "email_events") == D0
    assert dataset_complete_through([done], "sms_events") is None


def test_export_now_makes_one_immediate_attempt_then_the_backoff_applies():
    """Issue 22: a failing export-now was re-run on every sensor tick (its request stays pending)."""
    now = DAY0 + 4 * HOUR_MS
    # Pressed: the store lifted the wait of the failing dataset (failures and error stay).
    lifted = ds("email_events", DAY0, failures=3, next_retry_at=None, last_error_at=DAY0 + 3 * HOUR_MS)
    pressed = export(lifted, export_now_at=now)
    item = work_for(pressed, now)
    assert item is not None and item.export_now  # the one immediate attempt
    # That attempt failed 20 s later: the next retry time means something again.
    failed = replace(lifted, failures=4, next_retry_at=now + 2 * HOUR_MS, last_error_at=now + 20_000)
    after = replace(pressed, datasets=(failed,))
    assert after.export_now_pending(failed), "the request is still owed"
    for tick in range(1, 13):  # every 30 s for 6 minutes: nothing
        assert work_for(after, now + tick * 30_000) is None
    retry = work_for(after, now + 2 * HOUR_MS)
    assert retry is not None and retry.export_now  # still writes up to the request when it retries
