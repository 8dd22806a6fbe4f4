"""`verify --ledger` on a window an attempt left in the bucket that nothing will finish
(`verify.unfinished`; simulator seed 8011).

Seed 8011: the only part of an `sms_events` window landed, but its answer came past the deadline,
so the attempt failed with the part at intent. The dataset was removed before the retry, so the
window was never committed. `verify --ledger` reported the landed part as `not_in_ledger`
("no committed window"), as if something the control plane never heard of had written it. A
delete in the middle of a run leaves the same thing behind (docs: "files stay"). The real runner,
ledger, API and verify run here on local folders.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.local import LocalDestination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import EndpointTooSlow, RunInterrupted
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.verify.bucket import LocalBucket
from seqexport_dagster.management.verify.checks import verify_bucket
from seqexport_dagster.management.verify.unfinished import _possible_rows
from seqexport_dagster.store import COMMITTED, PART_INTENT, PART_LANDED
from seqexport_dagster.store.tables import parts
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

SCALE = Scale(subscribers=40, email_sends_per_hour=30, sms_sends_per_hour=0, custom_per_hour=0)


class AfterFirstWrite:
    """A local folder whose first PUT (of a key that ``ends`` so) lands, then ``then`` runs (it may
    raise: an answer too late)."""

    def __init__(self, config: DestinationConfig, then: Callable[[], None], ends: str = "") -> None:
        self.inner = LocalDestination(config.bucket)
        self.then = then
        self.ends = ends
        self.writes = 0

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        outcome = self.inner.put(key, body, create_only=create_only)
        if key.endswith(self.ends):
            self.writes += 1
            if self.writes == 1:
                self.then()
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        return None


def _too_late() -> None:
    raise EndpointTooSlow("did not finish answering within the request deadline")


def _part_ledger(world: World, export_id: str) -> list[tuple[str, int]]:
    with world.control_engine.connect() as conn:
        found = conn.execute(
            sa.select(parts.c.status, parts.c.rows).where(parts.c.export_id == export_id).order_by(parts.c.part)
        ).all()
    return [(r.status, r.rows) for r in found]


def _kinds(world: World, export_id: str) -> dict[str, list[str]]:
    report = verify_bucket(LocalBucket(world.root / "b"), ledger=(world.store, export_id), workers=1)
    assert report.ledger_checked
    return {p.kind: [x.key for x in report.problems if x.kind == p.kind] for p in report.problems}


def test_a_window_left_by_a_removed_dataset_is_the_ledgers(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=8011, scale=SCALE)
    api = Exports(world.store, world.policy, clock=world.clock)
    exp = api.create(
        account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events,custom_events"
    )
    world.clock.advance(HOUR_MS + 2 * MINUTE_MS)
    runner = world.runner(destination_factory=lambda c, p: AfterFirstWrite(c, _too_late))
    with pytest.raises(EndpointTooSlow):
        runner.run_day(exp.id, "email_events", day_of(DAY0))
    (attempt,) = world.store.ledger(exp.id)
    assert attempt.status != COMMITTED
    ((status, rows),) = _part_ledger(world, exp.id)
    assert status == PART_INTENT and rows > 0, "the part landed, but its outcome is unknown to the ledger"

    # While the dataset still waits for its retry, the window is still being written: reported.
    assert list(_kinds(world, exp.id)) == ["not_in_ledger"]

    api.remove_datasets(exp.id, ["email_events"])
    assert _kinds(world, exp.id) == {}, "the part ledger knows this window: not an unknown writer's"

    # Rows the ledger never recorded for it are still reported.
    folder = world.root / "b" / "email_events" / f"date={attempt.window.date_key}"
    (first,) = folder.iterdir()
    (folder / first.name.replace("-0000.", "-0001.")).write_bytes(first.read_bytes())
    assert "not_in_ledger" in _kinds(world, exp.id)


def test_a_window_left_by_a_delete_mid_run_is_the_ledgers(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=8012, scale=SCALE)
    api = Exports(world.store, world.policy, clock=world.clock)
    exp = api.create(account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events")
    world.clock.advance(6 * HOUR_MS + 2 * MINUTE_MS)

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return AfterFirstWrite(config, lambda: api.delete(exp.id))

    with pytest.raises(RunInterrupted, match="is deleted"):
        world.runner(part_limit=5, destination_factory=factory).run_day(exp.id, "email_events", day_of(DAY0))
    (attempt,) = world.store.ledger(exp.id)
    # Part 0000 landed; 0001 was recorded, then the run stopped before sending it.
    assert attempt.status != COMMITTED
    assert [status for status, _ in _part_ledger(world, exp.id)] == [PART_LANDED, PART_INTENT]
    assert len(list((world.root / "b" / "email_events").rglob("*.jsonl.gz"))) == 1
    assert _kinds(world, exp.id) == {}


def test_a_snapshot_day_left_by_a_delete_is_the_ledgers(world: World) -> None:
    """Sim seed 10001585: a snapshot day's part and its `_SUCCESS` landed, the `_SUCCESS`'s answer
    came too late, and the export was deleted before the retry: the day's part is the ledger's."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=8014, scale=SCALE)
    api = Exports(world.store, world.policy, clock=world.clock)
    exp = api.create(account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="subscribers")
    world.clock.advance(DAY_MS + 2 * HOUR_MS)
    runner = world.runner(destination_factory=lambda c, p: AfterFirstWrite(c, _too_late, ends="_SUCCESS"))
    with pytest.raises(EndpointTooSlow):
        runner.run_day(exp.id, "subscribers", day_of(DAY0))
    (attempt,) = world.store.ledger(exp.id)
    assert attempt.status != COMMITTED
    assert list((world.root / "b" / "subscribers").rglob("_SUCCESS")), "the day's _SUCCESS landed"

    # Live, the day is retried at the position: still being written, so reported.
    assert list(_kinds(world, exp.id)) == ["not_in_ledger"]
    api.delete(exp.id)
    assert _kinds(world, exp.id) == {}, "nothing will finish it: the part ledger's rows"


def test_a_late_part_left_by_a_delete_in_a_committed_window_is_the_ledgers(world: World) -> None:
    """Sim seeds 10000494, 10000533: a committed window gets a late-row part; it lands, its answer
    comes too late, and the export is deleted before anything commits the window again. The bucket
    holds the commit's rows plus the part's; while the export lives, reconciliation will commit
    them, so the difference is reported; once it is deleted, it is the part ledger's."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=8013, scale=SCALE)
    api = Exports(world.store, world.policy, clock=world.clock)
    exp = api.create(account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events")
    world.clock.advance(HOUR_MS + 2 * MINUTE_MS)
    world.runner().run_day(exp.id, "email_events", day_of(DAY0))
    (committed,) = world.store.ledger(exp.id)
    insert_rows(world.source_engine, "email_events", late_rows(committed.window, 1, "late"))
    world.clock.advance(10 * MINUTE_MS)
    late = world.runner(destination_factory=lambda c, p: AfterFirstWrite(c, _too_late))
    with pytest.raises(EndpointTooSlow):
        late.write_window(exp.id, "email_events", committed.window, late_only=True)
    assert [status for status, _ in _part_ledger(world, exp.id)] == [PART_LANDED, PART_INTENT]

    # The bucket alone (its manifests) names the part as not listed, live or deleted: no manifest
    # will list it until a commit. The ledger diff is what knows whether a commit is still to come.
    assert _kinds(world, exp.id).keys() == {"ledger_rows_mismatch", "unlisted_part"}, "still to be committed"
    api.delete(exp.id)
    assert _kinds(world, exp.id).keys() == {"unlisted_part"}, "nothing will commit it: the part ledger's rows"


def test_possible_rows_of_recorded_parts() -> None:
    # Every landed part must be there; after those, any prefix of the parts of unknown outcome.
    assert _possible_rows([(5, True), (5, True), (3, False)]) == {10, 13}
    assert _possible_rows([(5, False)]) == {5}, "the window is in the bucket: part 0000 at least"
    assert _possible_rows([(5, True), (4, False), (2, False)]) == {5, 9, 11}
    assert _possible_rows([]) == set()


def test_a_late_part_left_before_a_datasets_re_add_is_the_ledgers(world: World) -> None:
    """Long run #12 seed 48000010: a committed window's late part landed, its attempt never committed,
    and the dataset was removed, then added again. Added again, it starts anew from the re-add
    (docs/cli.md): nothing commits the old window, so its late part is the part ledger's."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=8013, scale=SCALE)
    api = Exports(world.store, world.policy, clock=world.clock)
    exp = api.create(
        account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events,custom_events"
    )
    world.clock.advance(HOUR_MS + 2 * MINUTE_MS)
    world.runner().run_day(exp.id, "email_events", day_of(DAY0))
    (committed,) = world.store.ledger(exp.id)
    insert_rows(world.source_engine, "email_events", late_rows(committed.window, 1, "late"))
    world.clock.advance(10 * MINUTE_MS)
    late = world.runner(destination_factory=lambda c, p: AfterFirstWrite(c, _too_late))
    with pytest.raises(EndpointTooSlow):
        late.write_window(exp.id, "email_events", committed.window, late_only=True)

    assert "ledger_rows_mismatch" in _kinds(world, exp.id), "live: reconciliation will commit it"
    api.remove_datasets(exp.id, ["email_events"])
    world.clock.advance(HOUR_MS)
    api.add_datasets(exp.id, ["email_events"])
    assert _kinds(world, exp.id).keys() == {"unlisted_part"}, "added again, it starts anew: nothing commits it"
