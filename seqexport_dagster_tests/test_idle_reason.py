"""Issue 17, item 8: why a scheduler tick requests nothing, in words (pure; `seqexport_dagster.delivery.idle`)."""

from __future__ import annotations

from typing import Any

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, iso_ms
from seqexport_dagster.delivery.idle import idle_reason
from seqexport_dagster_tests.support.world import DAY0, sqlite_world


def test_idle_reason_says_nothing_due_paused_or_in_backoff(tmp_path: Any) -> None:
    with sqlite_world(tmp_path) as world:
        assert idle_reason([], world.clock()) == "nothing due: no exports"
        up_to_date = world.local_export(datasets=("email_events",), folder="a")
        paused = world.local_export(datasets=("email_events",), folder="p")
        world.store.set_status(paused.id, "paused", world.clock())
        failing = world.local_export(datasets=("custom_events",), folder="f")
        world.clock.now_ms = DAY0 + 30 * MINUTE_MS
        failed = world.store.record_failure(failing.id, "custom_events", None, "access denied", world.clock())
        assert failed is not None and failed.next_retry_at == DAY0 + 30 * MINUTE_MS + HOUR_MS
        records = world.store.list_exports()
        due = iso_ms(DAY0 + HOUR_MS + 2 * MINUTE_MS)
        assert idle_reason(records, world.clock()) == (
            f"nothing due: 1 dataset(s) of active exports are up to date; next window due at {due}; "
            f"in backoff: {failing.id} custom_events retries at {iso_ms(failed.next_retry_at)} (attempt 2); "
            f"paused: {paused.id}"
        )
        assert up_to_date.id in idle_reason(records, world.clock(), busy={up_to_date.id})


def test_the_sensor_tick_carries_the_reason(tmp_path: Any, monkeypatch: Any) -> None:
    from seqexport_dagster_tests.support.dagster_harness import harness

    with harness(tmp_path, monkeypatch) as h:
        paused = h.world.local_export(datasets=("email_events",), folder="p")
        h.world.store.set_status(paused.id, "paused", h.world.clock())
        result = h.sensor_result()
        assert result.run_requests == [] and result.skip_reason is not None
        assert result.skip_reason.skip_message == f"nothing due; paused: {paused.id}"
        # The tick list shows the cursor as text, so it says the same, first, in words, what needs
        # an operator leading.
        assert result.cursor is not None and result.cursor.startswith(f"paused: {paused.id}; nothing due | {{")
        h.world.local_export(datasets=("email_events",), folder="a")
        h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
        busy = h.sensor_result()
        assert busy.skip_reason is None and len(busy.run_requests) == 1
