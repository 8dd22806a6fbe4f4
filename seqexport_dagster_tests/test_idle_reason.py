"""Issue 17, item 8, and issue 42: why a scheduler tick requests nothing, in a short line naming
accounts (pure; `seqexport_dagster.delivery.idle`)."""

from __future__ import annotations

from typing import Any

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.idle import idle_headline
from seqexport_dagster_tests.support.world import DAY0, sqlite_world


def test_idle_headline_names_the_accounts_in_backoff_and_paused_in_one_short_line(tmp_path: Any) -> None:
    with sqlite_world(tmp_path) as world:
        assert idle_headline([], world.clock()) == "no exports"
        up_to_date = world.local_export(datasets=("email_events",), folder="a")
        paused = world.local_export("globex", datasets=("email_events",), folder="p")
        world.store.set_status(paused.id, "paused", world.clock())
        failing = world.local_export("initech", datasets=("custom_events",), folder="f")
        world.clock.now_ms = DAY0 + 30 * MINUTE_MS
        failed = world.store.record_failure(failing.id, "custom_events", None, "access denied", world.clock())
        assert failed is not None and failed.next_retry_at == DAY0 + 30 * MINUTE_MS + HOUR_MS
        records = world.store.list_exports()
        line = idle_headline(records, world.clock())
        assert line == "backoff: initech (retry 01:30Z); paused: globex; next due 01:02Z"
        assert len(line) < 80
        assert idle_headline(records, world.clock(), busy={up_to_date.id}) == (
            "backoff: initech (retry 01:30Z); paused: globex; running: acme"
        )
        # Many accounts: three named, the rest counted.
        many = [world.local_export(f"acct{i}", datasets=("custom_events",), folder=f"m{i}") for i in range(5)]
        for e in many:
            world.store.record_failure(e.id, "custom_events", None, "access denied", world.clock())
        line = idle_headline(world.store.list_exports(), world.clock())
        assert line.startswith("backoff: acct0, acct1, acct2 +3 (retry 01:30Z)"), line


def test_the_sensor_tick_carries_the_reason(tmp_path: Any, monkeypatch: Any) -> None:
    from seqexport_dagster_tests.support.dagster_harness import harness

    with harness(tmp_path, monkeypatch) as h:
        paused = h.world.local_export(datasets=("email_events",), folder="p")
        h.world.store.set_status(paused.id, "paused", h.world.clock())
        result = h.sensor_result()
        assert result.run_requests == [] and result.skip_reason is not None
        assert result.skip_reason.skip_message == "paused: acme"
        # The tick list shows the cursor as text, so it says the same, first, in words.
        assert result.cursor is not None and result.cursor.startswith("paused: acme | {")
        h.world.local_export(datasets=("email_events",), folder="a")
        h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
        busy = h.sensor_result()
        assert busy.skip_reason is None and len(busy.run_requests) == 1
