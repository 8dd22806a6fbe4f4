"""Snapshot days under faults, on every kind of store the simulator knows (`support.sim.bucket`):
ordinary, create-only answering 412, create-only answering 403 (no precondition), and an ordinary
store without preconditions.

- Sim seed 10000040: a snapshot part whose answer was lost is re-sent under its name. A subscriber
  updated in between changed the part's rows, so the re-cut was a different body: refused by a
  create-only store without preconditions (a different body sent under an existing key), and it
  would have replaced the landed part on a store without preconditions that may overwrite.
- Sim seed 10000575: an operator's replace of a day not yet delivered at a create-only store
  without preconditions created its part, and the re-send after the lost answer was refused. The
  refusal lost its "outcome unknown" on the way, so the part's record was forgotten; the next
  attempt cut the day afresh and sent other bytes under the landed name, refused on every retry.
  A replace now asks the key first.
- Sim seed 5000: a replace of a past snapshot day whose ``_SUCCESS`` answered past the deadline
  was never finished, and the next day's commit cleared its error; the ledger kept the old
  snapshot's rows while the bucket held the new one.
- Long run #11 seed 30001224: a replace of a past day whose run worker died after its overwrite
  recorded no failure, so nothing named the day and nothing finished it; the ledger kept the old
  snapshot's rows. The next scheduled snapshot run finishes it.
- Sim seed 10001613: a replace refused by a create-only key left its day owed to the retry; after a
  move the retry delivered the day at the new place, before that place's chain (a gap).

Through the real runner, part ledger and planner, into the simulator's in-memory buckets (each
kind's write semantics, and a log of every send's answer that flags a replaced object).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from typing import Any
from unittest import mock

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, day_start_ms
from seqexport_dagster.delivery import planner
from seqexport_dagster.delivery.attempt import SUCCESS_NUMBER
from seqexport_dagster.delivery.batch import FAILED, BatchRunner
from seqexport_dagster.delivery.runner import DayReport, Runner
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.base import content_md5
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import AccessDenied, ExportError, RetryableError
from seqexport_dagster.store import COMMITTED, ExportRecord, snapshot_window
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.tables import parts
from seqexport_dagster_tests.support.scripted_store import ScriptedStore as Store
from seqexport_dagster_tests.support.sim.bucket import (
    CREATE_ONLY_403,
    CREATE_ONLY_412,
    KINDS,
    NO_PRECONDITION,
    ORDINARY,
)
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
LAG = 120_000
FOLDER = "subscribers/date=2026-09-30/"


def part_ids(body: bytes) -> list[str]:
    return [json.loads(line)["id"] for line in gzip.decompress(body).splitlines()]


def update_subscriber(world: World, sid: str) -> None:
    with world.source_engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE subscribers SET first_name = 'Renamed', updated_at = :t WHERE id = :i"),
            {"t": "2026-10-01T00:01:00.000Z", "i": sid},
        )


def delete_subscriber(world: World, sid: str) -> None:
    with world.source_engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM subscribers WHERE id = :i"), {"i": sid})


def add_subscribers(world: World, n: int) -> None:
    """Subscribers created after the days were delivered (copies of one under new ids)."""
    with world.source_engine.connect() as conn:
        row = list(conn.execute(sa.text("SELECT * FROM subscribers WHERE id = 'sub_acme_0000000'")).one())
    copies = [tuple([row[0], f"sub_acme_1{i:06d}", *row[2:]]) for i in range(n)]
    insert_rows(world.source_engine, "subscribers", copies)


def kept_bodies(world: World) -> list[bytes]:
    with world.control_engine.connect() as conn:
        return list(conn.execute(sa.select(parts.c.pending_body).where(parts.c.pending_body.is_not(None))).scalars())


def setup(world: World, kind: str, subscribers: int = 30) -> tuple[ExportRecord, Store]:
    export = world.local_export(datasets=("subscribers",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=subscribers))
    return export, Store(kind)


def committed_rows(world: World, export: ExportRecord, day: dt.date) -> int:
    window = snapshot_window(day_start_ms(day))
    attempts = [w for w in world.store.ledger(export.id, dataset="subscribers") if w.window == window]
    return [w for w in attempts if w.status == COMMITTED][-1].rows


def assert_day_agrees(world: World, export: ExportRecord, store: Store, day: dt.date) -> None:
    """What `verify --ledger` and a loader check: every subscriber once, ``_SUCCESS`` there, and
    the ledger's parts (rows, MD5) and committed rows those of the objects in the bucket."""
    objects = store.day(day)
    names = sorted(k for k in objects if not k.endswith("_SUCCESS"))
    assert any(k.endswith("_SUCCESS") for k in objects)
    ids = [i for k in names for i in part_ids(objects[k])]
    assert len(ids) == len(set(ids)), "every subscriber once"
    window = snapshot_window(day_start_ms(day))
    ledger = [p for p in world.store.window_parts(export.id, "subscribers", window, export.location) if p.number >= 0]
    assert [(p.key, p.rows, p.md5) for p in ledger] == [
        (k, len(part_ids(objects[k])), content_md5(objects[k])) for k in names
    ]
    assert all(p.landed for p in ledger)
    assert committed_rows(world, export, day) == len(ids)


@pytest.mark.parametrize("landed", [True, False], ids=["landed-answer-lost", "reset-before-sending"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_snapshot_part_of_unknown_outcome_is_resent_as_the_bytes_it_was_sent_with(
    world: World, kind: str, landed: bool
) -> None:
    """Sim seed 10000040. Between the two attempts one subscriber of part 0000 is updated and one
    is removed, so its rows cut again are no longer the bytes sent. The re-send goes out as the
    bytes kept with its intent, on every store: without a precondition it reaches the object if it
    landed, and with one a new cut whose answer were lost could not be told from the recorded one
    by a later 412 (seed 10001628)."""
    export, store = setup(world, kind)
    runner = world.runner(part_limit=20, destination_factory=lambda config, policy: store)
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    store.faults["subscribers-0000.jsonl.gz"] = "lost" if landed else "reset"
    with pytest.raises(RetryableError):
        runner.run_day(export.id, "subscribers", DAY)
    assert (f"{FOLDER}subscribers-0000.jsonl.gz" in store.bucket.objects) is landed
    (sent,) = [p for p in world.store.window_parts(export.id, "subscribers", snapshot_window(DAY0), export.location)]
    assert not sent.landed
    assert len(kept_bodies(world)) == 1, "the bytes are kept until the part lands"
    update_subscriber(world, "sub_acme_0000003")
    delete_subscriber(world, "sub_acme_0000004")

    world.clock.now_ms += HOUR_MS
    report = runner.run_day(export.id, "subscribers", DAY)
    assert report.snapshot is not None and report.snapshot.sent.resent == 1
    assert store.bucket.violations == [], "no different body under an existing key, nothing replaced"
    assert_day_agrees(world, export, store, DAY)
    first = part_ids(store.bucket.objects[f"{FOLDER}subscribers-0000.jsonl.gz"])
    assert "sub_acme_0000004" in first, "the part holds the rows as they were first sent"
    assert kept_bodies(world) == [], "the bytes go once the part has landed"


@pytest.mark.parametrize("kind", [ORDINARY, CREATE_ONLY_412])
def test_a_new_cut_created_under_a_lost_answer_is_not_taken_for_the_recorded_part(world: World, kind: str) -> None:
    """Sim seed 10001628, on stores with a precondition. Part 0000 is recorded and its connection
    drops before it is sent; a subscriber of it is removed. The next attempt's re-send lands and
    its answer is lost; the one after gets a 412. Sent as a new cut, the object would hold 19 rows
    while the ledger kept the first cut's 20 and its MD5 (`verify --ledger`: ledger_rows_mismatch).
    Every re-send is the bytes kept with the intent, so the object is the recorded part."""
    export, store = setup(world, kind)
    runner = world.runner(part_limit=20, destination_factory=lambda config, policy: store)
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    store.faults["subscribers-0000.jsonl.gz"] = "reset"
    with pytest.raises(RetryableError):
        runner.run_day(export.id, "subscribers", DAY)
    assert f"{FOLDER}subscribers-0000.jsonl.gz" not in store.bucket.objects
    delete_subscriber(world, "sub_acme_0000004")
    for fault in ("lost", None):
        world.clock.now_ms += HOUR_MS
        if fault:
            store.faults["subscribers-0000.jsonl.gz"] = fault
            with pytest.raises(RetryableError):
                runner.run_day(export.id, "subscribers", DAY)
        else:
            assert runner.run_day(export.id, "subscribers", DAY).snapshot is not None
    assert [w.answer for w in store.bucket.writes if w.key.endswith("-0000.jsonl.gz")] == ["created", "existed"]
    assert store.bucket.violations == []
    assert_day_agrees(world, export, store, DAY)
    assert "sub_acme_0000004" in part_ids(store.bucket.objects[f"{FOLDER}subscribers-0000.jsonl.gz"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_replace_of_a_past_snapshot_day_is_finished_and_keeps_its_error_until_then(
    world: World, kind: str
) -> None:
    """Sim seed 5000. An operator replaces two past days; on a store that may overwrite, the first
    day's ``_SUCCESS`` answers past the deadline (it landed: the day now holds the new snapshot),
    and the second day's replace succeeds. The first day's error stays (the second day's commit
    does not clear it), it is due again after the backoff, and that scheduled run finishes it, so
    the ledger says what the bucket holds. On a create-only key the replace is refused at its first
    overwrite (nothing replaced): the retry commits the day as it stands and clears the error."""
    export, store = setup(world, kind)
    # One part a day: a replace that grows a day by a part creates it after the old `_SUCCESS`.
    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: store)
    second = DAY + dt.timedelta(days=1)
    for n in (1, 2):
        world.clock.now_ms = DAY0 + n * DAY_MS + LAG
        assert runner.run_day(export.id, "subscribers", DAY + dt.timedelta(days=n - 1)).snapshot is not None
    add_subscribers(world, 45)
    may_overwrite = kind in (ORDINARY, NO_PRECONDITION)

    world.clock.now_ms = DAY0 + 2 * DAY_MS + 3 * HOUR_MS
    if may_overwrite:
        store.faults["_SUCCESS"] = "slow"
    with pytest.raises(ExportError):
        runner.run_day(export.id, "subscribers", DAY, rewrite=True, replace=True)
    if may_overwrite:
        assert runner.run_day(export.id, "subscribers", second, rewrite=True, replace=True).snapshot is not None
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 1
    assert state.last_error_window == snapshot_window(DAY0), "the failed day keeps its error"
    assert world.store.replace_unfinished(export.id, "subscribers", snapshot_window(DAY0), export.location) is (
        may_overwrite
    )

    assert state.next_retry_at is not None
    record = world.store.get_export(export.id)
    assert planner.due_day(record, state, state.next_retry_at - 1) is None, "backoff first"
    assert planner.due_day(record, state, state.next_retry_at) == DAY, "then the failed day again"
    world.clock.now_ms = state.next_retry_at
    report = runner.run_day(export.id, "subscribers", DAY)  # what the scheduled run of that day does
    assert report.snapshot is not None
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 0 and state.last_error is None
    assert not world.store.replace_unfinished(export.id, "subscribers", snapshot_window(DAY0), export.location)
    assert store.bucket.violations == []
    for day in (DAY, second):
        assert_day_agrees(world, export, store, day)
    rows = len([i for k, b in store.day(DAY).items() if not k.endswith("_SUCCESS") for i in part_ids(b)])
    assert rows == (75 if may_overwrite else 30), "the replace's snapshot where the key may overwrite"
    assert planner.due_day(world.store.get_export(export.id), state, world.clock()) is None


def test_a_replace_after_a_move_to_a_create_only_store_is_refused_before_anything(world: World) -> None:
    """Sim seed 10000575. A day delivered at an ordinary store; the export moves to a create-only
    store without preconditions (403), and an operator replaces the day there. The replace sent
    part 0000 as an overwrite of a name new there: it landed, its answer was lost, the re-send was
    refused and taken for a refused replace, and the part's record forgotten; every retry then cut
    the day afresh and sent other bytes under the landed name. The replace now asks the key first
    and is refused before it writes or records anything; the backfill without replace that the
    error suggests delivers the day there, create-only, and takes the refused re-send of the same
    bytes for "already there" (a probe tells it from a revoked key)."""
    export, old = setup(world, ORDINARY)
    new = Store(CREATE_ONLY_403, prefix="moved/")
    stores = {"": old, "moved": new}
    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: stores[config.prefix])
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    assert runner.run_day(export.id, "subscribers", DAY).snapshot is not None
    world.clock.now_ms += HOUR_MS
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="moved")
    export = world.store.update_destination(export.id, moved, world.clock())
    with pytest.raises(AccessDenied, match="Run the backfill without replace"):
        runner.run_day(export.id, "subscribers", DAY, rewrite=True, replace=True)
    assert world.store.window_parts(export.id, "subscribers", snapshot_window(DAY0), export.location) == []
    assert not [w for w in new.bucket.writes if w.key.startswith("moved/" + FOLDER)], "nothing of the day sent"

    new.faults["subscribers-0000.jsonl.gz"] = "lost-then-denied"
    update_subscriber(world, "sub_acme_0000003")
    report = runner.run_day(export.id, "subscribers", DAY, rewrite=True)
    assert report.snapshot is not None and report.snapshot.sent.existed == 1
    assert new.bucket.violations == [], "no different body sent under the landed name"
    assert_day_agrees(world, export, new, DAY)


@pytest.mark.parametrize("kind", [CREATE_ONLY_412, CREATE_ONLY_403])
def test_a_failed_replace_of_a_day_at_a_place_left_is_settled_not_delivered_at_the_new_one(
    world: World, kind: str
) -> None:
    """Sim seed 10001613. Two days delivered on a create-only store; an operator's replace of the
    first is refused by the key (nothing written), which leaves the dataset's error on that day; the
    export then moves. The day is owed to its retry, but its place is left for good and the day is
    complete there: delivered at the new place, it would sit before that place's chain with the
    second day missing, a gap. The retry settles the error instead and sends nothing."""
    export, old = setup(world, kind)
    new = Store(kind, prefix="moved/")
    stores = {"": old, "moved": new}
    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: stores[config.prefix])
    for n in (1, 2):
        world.clock.now_ms = DAY0 + n * DAY_MS + LAG
        assert runner.run_day(export.id, "subscribers", DAY + dt.timedelta(days=n - 1)).snapshot is not None
    world.clock.now_ms += HOUR_MS
    with pytest.raises(AccessDenied, match="Run the backfill without replace"):
        runner.run_day(export.id, "subscribers", DAY, rewrite=True, replace=True)
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="moved")
    export = world.store.update_destination(export.id, moved, world.clock())
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.last_error_window == snapshot_window(DAY0) and state.next_retry_at

    world.clock.now_ms = state.next_retry_at
    assert planner.due_day(export, state, world.clock()) == DAY, "the failed day is owed to its retry"
    report = runner.run_day(export.id, "subscribers", DAY)  # what the scheduled run of that day does
    assert report.snapshot is None and report.skipped_windows == 1
    assert not new.bucket.writes, "nothing sent to the new place"
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 0 and state.last_error is None and state.next_retry_at is None
    assert planner.due_day(export, state, world.clock()) is None, "nothing due until the next day"

    world.clock.now_ms = DAY0 + 3 * DAY_MS + LAG
    third = DAY + dt.timedelta(days=2)
    assert planner.due_day(export, state, world.clock()) == third, "the chain goes on from the position"
    assert runner.run_day(export.id, "subscribers", third).snapshot is not None
    assert {k.split("/")[2] for k in new.bucket.objects} == {"date=2026-10-02"}, "the new place's chain, no gap"


def test_a_failed_backfill_of_a_day_at_the_new_place_is_retried_there(world: World) -> None:
    """The other side of seed 10001613's settling: after a move, an operator's backfill delivers a
    day committed at the old place to the new one, and its first PUT is refused outright (a bucket
    policy, fixed since): nothing of it is recorded there. The day is owed, and since it failed at
    the current place its retry delivers it there, rather than settling it as a day of a place left."""
    export, old = setup(world, ORDINARY)
    new = Store(ORDINARY, prefix="moved/")
    stores = {"": old, "moved": new}
    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: stores[config.prefix])
    for n in (1, 2):
        world.clock.now_ms = DAY0 + n * DAY_MS + LAG
        assert runner.run_day(export.id, "subscribers", DAY + dt.timedelta(days=n - 1)).snapshot is not None
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="moved")
    export = world.store.update_destination(export.id, moved, world.clock())
    new.faults["subscribers-0000.jsonl.gz"] = "denied"
    with pytest.raises(AccessDenied):
        runner.run_day(export.id, "subscribers", DAY, rewrite=True)
    assert world.store.window_parts(export.id, "subscribers", snapshot_window(DAY0), export.location) == []
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.last_error_window == snapshot_window(DAY0) and state.next_retry_at

    world.clock.now_ms = state.next_retry_at
    report = runner.run_day(export.id, "subscribers", DAY)  # the scheduled retry of the owed day
    assert report.snapshot is not None, "delivered at the new place, as the operator asked"
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 0
    assert_day_agrees(world, export, new, DAY)


def test_a_backfill_whose_last_try_never_reached_the_ledger_leaves_the_day_owed(world: World) -> None:
    """Long run #11 seed 30001097. After a move to a create-only store without preconditions, an
    operator's backfill of a past day lands part 0000 there and its ``_SUCCESS`` meets a 503: a
    transient error, not counted, because the batch tries again. That last try fails in the control
    plane before its attempt is in the ledger, so nothing counted a failure or named the day, and
    no run ever came back for it: the day stayed at the new place without ``_SUCCESS``. The batch
    now names the day in the dataset's error, so it is owed, and the retry writes ``_SUCCESS``."""
    export, old = setup(world, CREATE_ONLY_403)
    new = Store(CREATE_ONLY_403, prefix="moved/")
    stores = {"": old, "moved": new}
    tries: list[bool] = []

    class DatabaseAwayOnLastTry(Runner):
        def run_day(self, *args: Any, **kwargs: Any) -> DayReport:
            tries.append(self.count_retryable)
            if self.count_retryable:  # the batch's last try
                raise RetryableError("control-plane database unavailable: a test outage")
            return super().run_day(*args, **kwargs)

    def make_runner(**kwargs: Any) -> Runner:
        return DatabaseAwayOnLastTry(
            world.store, world.source, world.policy, clock=world.clock, part_limit=100,
            destination_factory=lambda config, policy: stores[config.prefix], **kwargs,
        )  # fmt: skip

    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: stores[config.prefix])
    for n in (1, 2):
        world.clock.now_ms = DAY0 + n * DAY_MS + LAG
        assert runner.run_day(export.id, "subscribers", DAY + dt.timedelta(days=n - 1)).snapshot is not None
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="moved")
    export = world.store.update_destination(export.id, moved, world.clock())
    new.faults["_SUCCESS"] = "reset"
    batch = BatchRunner(
        make_runner, world.store, Leases(world.store.engine), holder="backfill", clock=world.clock,
        retry_delays_s=(0.0,), sleep=lambda seconds: None,
    )  # fmt: skip
    report = batch.run([export.id], [DAY], ["subscribers"], run_id="backfill", rewrite=True)
    assert report.outcomes[export.id].status == FAILED and tries == [False, True]
    assert sorted(k.rsplit("/", 1)[-1] for k in new.day(DAY)) == ["subscribers-0000.jsonl.gz"], "no _SUCCESS yet"
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 1 and state.next_retry_at is not None
    assert state.last_error_window == snapshot_window(DAY0), "the day is named: owed to its retry"

    world.clock.now_ms = state.next_retry_at
    assert planner.due_day(export, state, world.clock()) == DAY
    assert runner.run_day(export.id, "subscribers", DAY).snapshot is not None  # the scheduled retry
    assert new.bucket.violations == []
    assert_day_agrees(world, export, new, DAY)
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 0 and state.last_error is None


class WorkerLost(BaseException):
    """The run worker killed mid-write (SIGKILL, a lost node): nothing of it records anything after."""


@pytest.mark.parametrize("kind", [ORDINARY, NO_PRECONDITION])
def test_a_replace_whose_worker_died_after_its_overwrite_is_finished_by_the_next_scheduled_day(
    world: World, kind: str
) -> None:
    """Long run #11 seed 30001224. An operator's replace of a past day overwrites its part 0000 with
    the new snapshot, then its run worker dies before ``_SUCCESS`` and the commit: no failure is
    recorded, so no error names the day and it is not owed (`planner.owed_snapshot_day`). Before,
    nothing came back to it: the ledger kept the old snapshot's rows, the bucket held the new one
    (verify --ledger: ledger_rows_mismatch). The next scheduled snapshot run finishes it."""
    export, store = setup(world, kind)
    runner = world.runner(part_limit=100, destination_factory=lambda config, policy: store)
    for n in (1, 2):
        world.clock.now_ms = DAY0 + n * DAY_MS + LAG
        assert runner.run_day(export.id, "subscribers", DAY + dt.timedelta(days=n - 1)).snapshot is not None
    add_subscribers(world, 45)
    record = world.store.record_part_intent

    def dies_before_success(window_id: int, *, number: int, **kw: Any) -> None:
        if number == SUCCESS_NUMBER:
            raise WorkerLost
        record(window_id, number=number, **kw)

    world.clock.now_ms = DAY0 + 2 * DAY_MS + 3 * HOUR_MS
    with mock.patch.object(world.store, "record_part_intent", dies_before_success), pytest.raises(WorkerLost):
        runner.run_day(export.id, "subscribers", DAY, rewrite=True, replace=True)
    assert len(part_ids(store.day(DAY)[f"{FOLDER}subscribers-0000.jsonl.gz"])) == 75, "overwritten"
    state = world.store.get_export(export.id).dataset_state("subscribers")
    assert state is not None and state.failures == 0 and planner.owed_snapshot_day(state) is None
    assert world.store.replace_unfinished(export.id, "subscribers", snapshot_window(DAY0), export.location)
    assert committed_rows(world, export, DAY) == 30, "the ledger still has the old snapshot"

    third = DAY + dt.timedelta(days=2)
    world.clock.now_ms = DAY0 + 3 * DAY_MS + LAG
    assert planner.due_day(world.store.get_export(export.id), state, world.clock()) == third
    assert runner.run_day(export.id, "subscribers", third).snapshot is not None  # the scheduled run
    assert not world.store.replace_unfinished(export.id, "subscribers", snapshot_window(DAY0), export.location)
    assert store.bucket.violations == []
    for day in (DAY, DAY + dt.timedelta(days=1), third):
        assert_day_agrees(world, export, store, day)
    assert committed_rows(world, export, DAY) == 75
