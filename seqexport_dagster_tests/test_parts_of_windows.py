"""`ControlPlane.parts_of_windows` (a reconciliation pass's one read of the part ledger of every
window it checks) says what `parts_everywhere` says window by window: after late parts, a move with
late rows continued at the new place, and for a window the ledger never saw."""

from __future__ import annotations

import datetime as dt
from typing import Any
from unittest import mock

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import RetryableError
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)


def test_parts_of_windows_agrees_with_parts_everywhere(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 6 * HOUR_MS, scale=Scale(20, 30, 0, 0))
    export = world.local_export(datasets=("email_events",))
    runner = world.runner(part_limit=10)
    for hour in (1, 2, 3, 4):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * MINUTE_MS
        runner.run_day(export.id, "email_events", DAY)
    committed = sorted({w.window for w in world.store.ledger(export.id)})
    assert len(committed) >= 3
    insert_rows(world.source_engine, "email_events", late_rows(committed[0], 3, "early"))
    reconcile(runner, export.id)
    moved = DestinationConfig("local", str(world.root / "moved"))
    export = world.store.update_destination(export.id, moved, world.clock())
    insert_rows(world.source_engine, "email_events", late_rows(committed[1], 2, "moved"))
    world.clock.now_ms += 10 * MINUTE_MS
    reconcile(runner, export.id)

    never = Window(DAY0 + 5 * HOUR_MS, DAY0 + 6 * HOUR_MS)
    wanted = [*committed, never]
    together = world.store.parts_of_windows(export.id, "email_events", wanted, here=export.location)
    one_by_one = {w: world.store.parts_everywhere(export.id, "email_events", w, here=export.location) for w in wanted}
    assert together == one_by_one
    assert len(together[committed[1]]) == 2, "the window at both places"
    assert together[never] == {}
    assert sum(len(p) for p in together[committed[0]].values()) >= 2, "its late part is there too"


@pytest.mark.parametrize(
    "call",
    [
        lambda s, e, w: s.parts_of_windows(e, "email_events", [w], here="x"),
        lambda s, e, w: s.parts_everywhere(e, "email_events", w, here="x"),
        lambda s, e, w: s.committed_since(e, "email_events", since_ms=w.from_ms, until_ms=w.to_ms),
        lambda s, e, w: s.windows_awaiting_parts(e, "email_events", "x", w.to_ms, after_ms=w.from_ms),
        lambda s, e, w: s.windows_replace_unfinished(e, "email_events", "x", w.to_ms, after_ms=w.from_ms),
        lambda s, e, w: s.committed_places(e, "email_events", w),
        lambda s, e, w: s.last_attempt_place(e, "email_events", w),
        lambda s, e, w: s.settle_error(e, "email_events", w, 0),
    ],
    ids=[
        "parts_of_windows",
        "parts_everywhere",
        "committed_since",
        "windows_awaiting_parts",
        "windows_replace_unfinished",
        "committed_places",
        "last_attempt_place",
        "settle_error",
    ],
)
def test_reconciliations_reads_leave_an_outage_as_retryable(world: World, call: Any) -> None:
    """A control-plane outage in any of these reads is `RetryableError` (retried in the run), not
    a driver error taken for an internal one."""
    down = sa.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    window = Window(DAY0, DAY0 + HOUR_MS)
    with (
        mock.patch.object(world.store.engine, "connect", side_effect=down),
        mock.patch.object(world.store.engine, "begin", side_effect=down),
    ):
        with pytest.raises(RetryableError, match="control-plane database unavailable"):
            call(world.store, "exp_x", window)
