"""The sensor's lean reads of the fleet, on SQLite and PostgreSQL (issue 29): `fleet.fleet_exports`
(the same records as `list_exports`, rebuilt only for exports whose rows changed) and
`fleet.unfinished_attempts` (through the partial index of attempts not committed)."""

from __future__ import annotations

import pytest

from seqexport_dagster.contract.window import MINUTE_MS, Window
from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.store import DELETED, PAUSED
from seqexport_dagster.store.fleet import fleet_exports, unfinished_attempts
from seqexport_dagster_tests.support.world import World


def varied_fleet(world: World) -> dict[str, str]:
    """Exports in every shape a record can take: plain, paused, deleted, a dataset removed, failing
    (failures, backoff, last error and its window), parquet, S3 with SSE-KMS and a role."""
    ids = {
        "plain": world.local_export("a1", frequency="15m").id,
        "paused": world.local_export("a2").id,
        "deleted": world.local_export("a3").id,
        "removed": world.local_export("a4", datasets=("email_events", "subscribers")).id,
        "failing": world.local_export("a5", datasets=("sms_events",)).id,
        "parquet": world.local_export("a6", file_format="parquet").id,
    }
    s3 = DestinationConfig(
        "s3", "bkt", region="eu-west-1", prefix="p/", sse="aws:kms", kms_key_id="arn:aws:kms:eu-west-1:1:key/k",
        role_arn="arn:aws:iam::123456789012:role/seq",
    )  # fmt: skip
    ids["s3"] = world.store.create_export(
        account_id="a7", destination=s3, datasets=("custom_events",), frequency="1h", lag_ms=0, now_ms=world.clock()
    ).id
    world.clock.advance(MINUTE_MS)
    world.store.set_status(ids["paused"], PAUSED, world.clock())
    world.store.set_status(ids["deleted"], DELETED, world.clock())
    world.store.remove_dataset(ids["removed"], "subscribers", world.clock())
    window = Window(world.clock(), world.clock() + 15 * MINUTE_MS)
    world.store.record_failure(ids["failing"], "sms_events", window, "boom", world.clock())
    world.store.request_export_now(ids["plain"], world.clock())
    return ids


@pytest.mark.parametrize("db", ["world", "pg_world"])
def test_fleet_exports_equal_list_exports_and_reuse_unchanged_records(db, request):
    world: World = request.getfixturevalue(db)
    ids = varied_fleet(world)
    listed = world.store.list_exports()
    first = fleet_exports(world.control_engine)
    assert first == listed and [e.id for e in first] == [e.id for e in listed]
    assert ids["deleted"] not in {e.id for e in first}
    failing = next(e for e in first if e.id == ids["failing"])
    assert failing.datasets[0].failures == 1 and failing.datasets[0].last_error_window is not None
    assert next(e for e in first if e.id == ids["removed"]).datasets[0].dataset == "email_events"
    assert next(e for e in first if e.id == ids["s3"]).role_arn is not None
    assert next(e for e in first if e.id == ids["parquet"]).format == "parquet"

    # An unchanged fleet: the very same records come back.
    again = fleet_exports(world.control_engine)
    assert again == listed and all(a is b for a, b in zip(again, first, strict=True))

    # A position moved (a committed window), a failure counted, a setting edited: those three are
    # rebuilt and equal what list_exports reads; every other record is reused.
    world.clock.advance(20 * MINUTE_MS)
    plain = world.store.get_export(ids["plain"])
    state = plain.datasets[0]
    window_id = world.store.start_window(
        plain.id, state.dataset, Window(state.position_ms, state.position_ms + 5 * MINUTE_MS),
        run_id="r1", location=plain.location, now_ms=world.clock(),
    )  # fmt: skip
    assert world.store.commit_window(window_id, rows=0, part_count=0, size=0, now_ms=world.clock())
    world.store.record_failure(ids["failing"], "sms_events", None, "again", world.clock())
    world.store.set_frequency(ids["parquet"], "1h", world.clock())
    third = fleet_exports(world.control_engine)
    assert third == world.store.list_exports()
    changed = {ids["plain"], ids["failing"], ids["parquet"]}
    for old, new in zip(first, third, strict=True):
        assert (old is new) == (new.id not in changed), new.id
    assert next(e for e in third if e.id == ids["failing"]).datasets[0].failures == 2


@pytest.mark.parametrize("db", ["world", "pg_world"])
def test_unfinished_attempts_is_the_latest_attempt_at_the_position_when_not_committed(db, request):
    world: World = request.getfixturevalue(db)
    store = world.store
    retried = world.local_export("b1", datasets=("email_events", "sms_events")).id
    moved = world.local_export("b2", datasets=("email_events",)).id
    removed = world.local_export("b3", datasets=("email_events", "sms_events")).id
    world.clock.advance(30 * MINUTE_MS)

    def attempt(export_id: str, dataset: str, minutes: int, *, fail: bool) -> Window:
        state = store.get_export(export_id).dataset_state(dataset)
        assert state is not None
        window = Window(state.position_ms, state.position_ms + minutes * MINUTE_MS)
        location = store.get_export(export_id).location
        wid = store.start_window(export_id, dataset, window, run_id="r", location=location, now_ms=world.clock())
        if fail:
            store.fail_window(wid, error="boom", now_ms=world.clock())
        else:
            assert store.commit_window(wid, rows=0, part_count=0, size=0, now_ms=world.clock())
        return window

    attempt(retried, "email_events", 10, fail=True)
    latest = attempt(retried, "email_events", 15, fail=True)  # a second failure at the same place
    attempt(moved, "email_events", 5, fail=True)
    attempt(moved, "email_events", 5, fail=False)  # then committed: the position moved past both
    attempt(removed, "sms_events", 5, fail=True)
    store.remove_dataset(removed, "sms_events", world.clock())
    still_there = attempt(removed, "email_events", 5, fail=True)
    assert unfinished_attempts(world.control_engine) == {
        (retried, "email_events"): latest,
        (removed, "email_events"): still_there,
    }
