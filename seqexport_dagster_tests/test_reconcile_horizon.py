"""The reconciliation horizon counts from the dataset's last complete pass (simulator findings of
issue 22: PostgreSQL seed 11, seeds 3, 200 and 201, and a frequency change).

A late row is delivered if it becomes visible within the lateness of the time it carries, whatever
happens between its arrival and the next pass: the export paused, the dataset failing at its
position (the pass skips it, so its error stays visible) for longer than the lookback, or a shorter
frequency that shrinks the lookback. Before, the lookback counted from the pass's own start and
such rows were never rechecked. Through the real runner, ledger and reconciliation, on a real
database, into a moto bucket behind the fault proxy (plain and write-once) or a local folder, and
audited as a loader reads the bucket.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.delivery.reconcile import PRUNE_AFTER_MS, lookback_for, reconcile, since_for
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import ExportError
from seqexport_dagster.store import ACTIVE, PAUSED
from seqexport_dagster_tests.support.bucket_audit import audit_export, source_ids
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import s3_export, s3_runner
from seqexport_dagster_tests.support.world import DAY0, World

LATENESS = 6 * HOUR_MS
SCALE = Scale(subscribers=40, email_sends_per_hour=12, sms_sends_per_hour=0, custom_per_hour=0)
EMAIL = ("email_events",)


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(moto.port, write_once=request.param == "write-once")
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        server.close()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-run retry delays (ours and botocore's) take no real time here."""
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def late_rows(window: Window, n: int, tag: str) -> list[tuple[Any, ...]]:
    """Email rows carrying a ``recorded_at`` in the last minutes of ``window``, written late."""
    return [
        (
            "acme", f"eev_{tag}_{i:04d}", "delivered", iso_ms(window.to_ms - 60_000 * (i + 1)),
            iso_ms(window.to_ms - 60_000 * (i + 1)), "sub_acme_0000001", "late@example.com", None, None,
            f"msg_{tag}_{i}", "Late", None, None, None, None, None,
        )
        for i in range(n)
    ]  # fmt: skip


def scheduled(world: World, runner: Any, export_id: str, at_ms: int) -> None:
    """A scheduled run at ``at_ms``: the due windows of its day, then the scheduled reconciliation."""
    world.clock.now_ms = at_ms
    for k in range((at_ms - DAY0) // DAY_MS + 1):
        runner.run_day(export_id, "email_events", dt.date(2026, 9, 30) + dt.timedelta(days=k))
    reconcile(runner, export_id, lateness_ms=LATENESS, thin=True)


def test_late_rows_that_arrive_while_the_dataset_fails_longer_than_the_lookback_are_delivered(
    world: World, moto: Any, proxy: fp.FaultProxy
) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 20 * HOUR_MS, scale=SCALE)
    s3 = moto.admin_client()
    export = s3_export(world, s3, proxy, datasets=EMAIL, frequency="1h")
    runner = s3_runner(world, part_limit=20)
    for hour in range(1, 5):
        scheduled(world, runner, export.id, DAY0 + hour * HOUR_MS + 3 * MINUTE_MS)
    window = Window(DAY0 + 3 * HOUR_MS, DAY0 + 4 * HOUR_MS)
    insert_rows(world.source_engine, "email_events", late_rows(window, 5, "failing"))  # visible 1 h late

    # The key is revoked: every due window fails at the position, and the pass skips the dataset
    # (its error must stay visible) for longer than the lookback.
    denied = proxy.add(fp.access_denied())
    for hour in range(5, 16):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * MINUTE_MS
        with pytest.raises(ExportError):
            runner.run_day(export.id, "email_events", dt.date(2026, 9, 30))
        assert reconcile(runner, export.id, lateness_ms=LATENESS, thin=True) == []
    healed_at = DAY0 + 16 * HOUR_MS + 3 * MINUTE_MS
    assert healed_at - lookback_for(export, LATENESS) > window.to_ms, "the window is out of the lookback"

    proxy.remove(denied)
    scheduled(world, runner, export.id, healed_at)
    audit = audit_export(world.store, world.source_engine, s3, export.id)
    audit.assert_clean()
    assert audit.datasets["email_events"].missing == 0
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 0 and state.reconciled_at == healed_at
    later = healed_at + HOUR_MS
    world.clock.now_ms = later
    assert not any(r.report for r in reconcile(runner, export.id, lateness_ms=LATENESS)), "nothing owed twice"


def delivered(world: World) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in (world.root / "bucket" / "email_events").rglob("*.jsonl.gz"):
        found.update(json.loads(line)["id"] for line in gzip.decompress(path.read_bytes()).splitlines())
    return found


def test_late_rows_survive_a_pause_longer_than_the_lookback_and_a_shorter_frequency(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 4 * DAY_MS, scale=SCALE)
    daily = world.local_export(datasets=EMAIL, frequency="24h")
    runner = world.runner(part_limit=20)
    first_day = Window(DAY0, DAY0 + DAY_MS)
    scheduled(world, runner, daily.id, DAY0 + DAY_MS + 3 * MINUTE_MS)
    # Rows of the first day become visible 5 h late, under the 24 h frequency: the next daily run
    # would recheck that window. The frequency drops to 15 minutes first, and its lookback (6 h,
    # two frequencies and the lag) no longer reaches the first day when the next run comes.
    world.clock.now_ms = DAY0 + DAY_MS + 5 * HOUR_MS
    insert_rows(world.source_engine, "email_events", late_rows(first_day, 3, "daily"))
    world.clock.now_ms = DAY0 + DAY_MS + 20 * HOUR_MS
    world.store.set_frequency(daily.id, "15m", world.clock())
    # Then a pause longer than the lookback, with more rows of the last committed window arriving.
    scheduled(world, runner, daily.id, DAY0 + DAY_MS + 20 * HOUR_MS + 3 * MINUTE_MS)
    assert all(f"eev_daily_{i:04d}" in delivered(world) for i in range(3)), "rows of the old frequency's window"
    position = world.store.get_export(daily.id).dataset_state("email_events")
    assert position is not None
    last = Window(position.position_ms - 15 * MINUTE_MS, position.position_ms)
    world.store.set_status(daily.id, PAUSED, world.clock())
    world.clock.now_ms += HOUR_MS
    insert_rows(world.source_engine, "email_events", late_rows(last, 4, "paused"))
    world.clock.now_ms += DAY_MS
    assert reconcile(runner, daily.id, lateness_ms=LATENESS, thin=True) == [], "a paused export is not checked"
    world.store.set_status(daily.id, ACTIVE, world.clock())
    resumed = world.clock() + 3 * MINUTE_MS
    assert resumed - lookback_for(world.store.get_export(daily.id), LATENESS) > last.to_ms
    scheduled(world, runner, daily.id, resumed)

    found = delivered(world)
    position = world.store.get_export(daily.id).dataset_state("email_events")
    assert position is not None
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, position.position_ms))
    assert all(f"eev_paused_{i:04d}" in found for i in range(4)), "rows that arrived during the pause"
    assert set(found) == expected and max(found.values()) == 1, "every row exactly once"


def test_late_rows_of_a_window_committed_before_any_complete_pass_are_delivered(world: World) -> None:
    # Sim seed 10000028: a daily window committed, but no scheduled pass completed for the dataset
    # (the run's worker died after the commit, the retry carried only the other datasets, then the
    # export paused); its late rows became visible, the frequency dropped to 1 h, and the first
    # pass, counted from its own start, missed the window.
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=SCALE)
    daily = world.local_export(datasets=EMAIL, frequency="24h")
    runner = world.runner(part_limit=20)
    first_day = Window(DAY0, DAY0 + DAY_MS)
    world.clock.now_ms = DAY0 + DAY_MS + 3 * MINUTE_MS
    runner.run_day(daily.id, "email_events", dt.date(2026, 9, 30))  # committed, not reconciled
    state = world.store.get_export(daily.id).dataset_state("email_events")
    assert state is not None and state.position_ms == first_day.to_ms and state.reconciled_at is None
    world.clock.now_ms = DAY0 + DAY_MS + 5 * HOUR_MS
    insert_rows(world.source_engine, "email_events", late_rows(first_day, 3, "unreconciled"))
    world.clock.now_ms = DAY0 + DAY_MS + 22 * HOUR_MS
    world.store.set_frequency(daily.id, "1h", world.clock())
    at = world.clock() + 3 * MINUTE_MS
    assert at - lookback_for(world.store.get_export(daily.id), LATENESS) > first_day.to_ms, "out of the lookback"
    scheduled(world, runner, daily.id, at)

    found = delivered(world)
    assert all(f"eev_unreconciled_{i:04d}" in found for i in range(3)), "late rows of the unreconciled window"
    position = world.store.get_export(daily.id).dataset_state("email_events")
    assert position is not None and position.reconciled_at == at
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, position.position_ms))
    assert set(found) == expected and max(found.values()) == 1, "every row exactly once"


def test_before_any_complete_pass_the_reach_starts_at_the_dataset_and_stops_at_the_pruned_ids(world: World) -> None:
    export = world.local_export(datasets=EMAIL, frequency="1h")
    state = export.dataset_state("email_events")
    assert state is not None and state.reconciled_at is None
    now = state.added_at + 3 * DAY_MS
    lookback = lookback_for(export, LATENESS)
    assert since_for(export, state, now, lookback, LATENESS) == state.added_at - LATENESS - export.lag_ms
    assert since_for(export, state, now, lookback, None) == now - lookback, "a manual pass keeps its lookback"
    # A dataset from before `reconciled_at` existed: its ids older than the pruning horizon are gone.
    old = dataclasses.replace(state, added_at=now - 30 * DAY_MS)
    assert since_for(export, old, now, lookback, LATENESS) == now - PRUNE_AFTER_MS
    passed = dataclasses.replace(old, reconciled_at=now - HOUR_MS)
    assert since_for(export, passed, now, lookback, LATENESS) == now - lookback
