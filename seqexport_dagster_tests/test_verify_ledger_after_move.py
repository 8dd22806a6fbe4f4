"""`verify --ledger` at a new place after a late-rows pass that had nothing to add there
(simulator seed 10000000 at 3 days).

A window delivered before a move fails a late-rows attempt (a control-plane outage: the window is
the dataset's last error). After the move, reconciliation comes back to that window, finds every
row already delivered (at the old place) and commits an attempt at the new place with no part and
no row, which clears the error. The ledger then has a commit here that claims nothing in this
bucket; `verify --ledger` took it for a window missing from the bucket (``ledger_window_missing
... committed with 0 rows, not in bucket``). Real runner, ledger, reconciliation and verify on local
folders.
"""

from __future__ import annotations

import datetime as dt

import pytest

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination import Destination, OperatorPolicy, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.errors import EndpointTooSlow, ExportError
from seqexport_dagster.management.verify.bucket import LocalBucket
from seqexport_dagster.management.verify.checks import verify_bucket
from seqexport_dagster.store import COMMITTED
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)


def test_a_commit_with_nothing_to_add_at_the_new_place_is_not_a_missing_window(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    export = world.local_export(datasets=("email_events",), folder="old")
    runner = world.runner()
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (first,) = world.store.ledger(export.id)
    w = first.window
    # A late-rows attempt at that window failed (the control plane was down): its last error.
    world.store.record_failure(export.id, "email_events", w, "control-plane database unavailable", world.clock())

    export = world.store.update_destination(
        export.id, DestinationConfig("local", str(world.root / "new")), world.clock()
    )
    world.clock.now_ms += HOUR_MS
    runner.run_day(export.id, "email_events", DAY)  # the next due window, at the new place
    reconcile(runner, export.id)

    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 0 and state.last_error is None, "the pass cleared the error"
    here = [e for e in world.store.ledger(export.id) if e.window == w and e.status == COMMITTED and e.rows == 0]
    assert here, "the pass committed the window at the new place with nothing to add"

    report = verify_bucket(LocalBucket(world.root / "new"), ledger=(world.store, export.id), workers=1)
    assert report.ok and report.ledger_checked, report.render()
    # verify still sees a window of this place that the bucket lost.
    due = [p for p in (world.root / "new" / "email_events").rglob("*.jsonl.gz")]
    assert len(due) == 1
    due[0].unlink()
    lost = verify_bucket(LocalBucket(world.root / "new"), ledger=(world.store, export.id), workers=1)
    assert "ledger_window_missing" in {p.kind for p in lost.problems}, lost.render()


class _AnswerTooLate:
    """The real destination, whose first write under ``key_part`` lands and then answers too late."""

    def __init__(self, inner: Destination, key_part: str) -> None:
        self.inner, self.key_part, self.fired = inner, key_part, False

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        outcome = self.inner.put(key, body, create_only=create_only)
        if self.key_part in key and not self.fired:
            self.fired = True
            raise EndpointTooSlow("did not finish answering within the request deadline")
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


def test_a_new_place_with_no_commit_yet_is_not_held_to_the_windows_committed_elsewhere(world: World) -> None:
    """Sim seed 10000132: after a move, a backfill with replace rewrote the day's first window at
    the new place; its part landed, the answer came too late and the attempt failed, so nothing was
    committed there yet. `verify --ledger` took the place for one it did not know and held it to
    every window committed anywhere from that window on: the later window, committed only at the
    old place, was reported ``ledger_window_missing``."""
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    export = world.local_export(datasets=("email_events",), folder="old")
    runner = world.runner()
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    world.clock.now_ms += HOUR_MS
    runner.run_day(export.id, "email_events", DAY)
    first, second = sorted({e.window for e in world.store.ledger(export.id)})
    export = world.store.update_destination(
        export.id, DestinationConfig("local", str(world.root / "new")), world.clock()
    )

    def late(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return _AnswerTooLate(open_destination(config, policy), f"-{first.from_ms}-{first.to_ms}-0000")

    with pytest.raises(ExportError):
        world.runner(destination_factory=late).run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    at_new = [e for e in world.store.ledger(export.id) if e.window == first and e.status != COMMITTED]
    assert at_new, "the replace's attempt at the new place failed"
    assert list((world.root / "new" / "email_events").rglob("*.jsonl.gz")), "after landing its part"

    report = verify_bucket(LocalBucket(world.root / "new"), ledger=(world.store, export.id), workers=1)
    assert report.ledger_checked
    assert not [p for p in report.problems if p.kind == "ledger_window_missing"], report.render()
    assert str(second) not in report.render()
