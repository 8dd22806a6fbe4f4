"""Export now makes ONE immediate attempt; if it fails, the normal backoff applies (issue 22).

Through the real scheduler sensor on a real Dagster instance, its runs executed in-process, against
a moto server whose bucket does not exist (a customer deleted it): runs are counted over simulated
time, the sensor ticking every 30 s as the daemon does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, backoff_ms
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.world import DAY0

TICK_MS = 30_000


@pytest.fixture
def h(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with harness(tmp_path, monkeypatch) as value:
        yield value


def runs_over(h: Harness, start_ms: int, minutes: int) -> int:
    """Ticks every 30 s from ``start_ms`` for ``minutes``; returns how many runs they launched."""
    launched = 0
    for step in range(minutes * 60_000 // TICK_MS):
        h.world.clock.now_ms = start_ms + step * TICK_MS
        launched += len(h.tick().results)
    return launched


def test_a_failing_export_now_runs_once_then_waits_for_its_backoff(h: Harness, moto: Any) -> None:
    export = h.world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            f"deleted-{uuid.uuid4().hex[:12]}",  # never created: every PUT gets NoSuchBucket
            prefix="sequenzy",
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIAEXPORTNOW",
            secret_access_key="export-now-secret",
        ),
        datasets=("email_events",),
        frequency="1h",
        lag_ms=2 * MINUTE_MS,
        now_ms=DAY0,
    )
    pressed = DAY0 + 40 * MINUTE_MS  # nothing is due on the schedule yet: only export-now can run
    h.world.clock.now_ms = pressed
    h.world.store.request_export_now(export.id, pressed)

    assert runs_over(h, pressed, 6) == 1, "one immediate attempt, not one run per tick"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1 and state.last_error is not None
    assert state.next_retry_at is not None and state.last_error_at is not None
    assert state.next_retry_at == state.last_error_at + backoff_ms("1h", 1)
    assert h.world.store.get_export(export.id).export_now_at == pressed  # still owed, after the backoff

    # The next retry time means what it says: nothing before it, one run at it.
    assert runs_over(h, pressed + 6 * MINUTE_MS, (state.next_retry_at - pressed) // MINUTE_MS - 7) == 0
    assert runs_over(h, state.next_retry_at, 3) == 1
    again = h.world.store.get_export(export.id).dataset_state("email_events")
    assert again is not None and again.failures == 2
    assert again.next_retry_at == (again.last_error_at or 0) + backoff_ms("1h", 2)
    assert again.next_retry_at >= pressed + 3 * HOUR_MS - MINUTE_MS
