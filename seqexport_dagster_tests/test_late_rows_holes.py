"""Late rows that used to be lost silently (issue 22, "What did not"), each through the real runner and
reconciliation into a real moto bucket behind the fault proxy, plain and create-only (write-once),
and audited as a customer's loader reads the bucket.

- A late-row part whose every try failed stays at ``intent`` in the ledger: it is not delivered, so
  the next reconciliation sends it again under its own name, and the export shows its error until
  then (a due window committing in between does not clear it).
- Reconciliation retries a transient failure inside the run, as a normal window does.
- Late rows of a window committed before a destination move go to the current location (below).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace as dc_replace
from typing import Any

import pytest

from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import ExportError, RetryableError
from seqexport_dagster.management.verify import verify_location
from seqexport_dagster.store import PART_INTENT
from seqexport_dagster_tests.support.bucket_audit import audit_export, read_objects, source_ids
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import new_bucket, s3_export, s3_runner
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
SCALE = Scale(subscribers=60, email_sends_per_hour=30, sms_sends_per_hour=5, custom_per_hour=10)
W12 = Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)
EMAIL = ("email_events",)


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(moto.port, write_once=request.param == "write-once")
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        server.close()


@pytest.fixture
def s3(moto: Any) -> Any:
    return moto.admin_client()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-run retry delays (ours and botocore's) take no real time here."""
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def late_rows(window: Window, n: int, tag: str) -> list[tuple[Any, ...]]:
    """Email rows whose write became visible long after the ``recorded_at`` they carry."""
    return [
        (
            "acme", f"eev_{tag}_{i:04d}", "delivered", iso_ms(window.from_ms + 1000 * i + 1),
            iso_ms(window.from_ms + 1000 * i + 7), "sub_acme_0000001", "late@example.com", None, None,
            f"msg_{tag}_{i}", "Late", None, None, None, None, None,
        )
        for i in range(n)
    ]  # fmt: skip


def scheduled(world: World, runner: Any, export_id: str, hour: int) -> None:
    """The scheduled run at ``hour`` h + 3 min: the due windows, then reconciliation."""
    world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export_id, "email_events", DAY)
    reconcile(runner, export_id)


def test_a_late_part_that_failed_every_try_is_sent_again_and_its_error_stays_until_then(
    world: World, s3: Any, proxy: fp.FaultProxy
) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=20)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    insert_rows(world.source_engine, "email_events", late_rows(W12, 7, "late"))

    # Every PUT of the late part is reset (botocore's own tries and ours): its outcome is unknown.
    fault = proxy.add(fp.reset(match=f"-{W12.from_ms}-{W12.to_ms}-", times=None))
    world.clock.now_ms = DAY0 + 4 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    with pytest.raises(RetryableError):
        reconcile(runner, export.id)
    parts = world.store.window_parts(export.id, "email_events", W12, export.location)
    assert [p.status for p in parts][-1] == PART_INTENT
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1 and state.last_error_window == W12  # counted once
    assert audit_export(world.store, world.source_engine, s3, export.id).datasets["email_events"].missing == 7

    # The store heals. The next scheduled run commits its due window first: the error must stay,
    # since 7 rows are still undelivered; then reconciliation re-sends the part under its own name.
    proxy.remove(fault)
    world.clock.now_ms = max(world.clock(), state.next_retry_at or 0, DAY0 + 5 * HOUR_MS + 3 * MINUTE_MS)
    runner.run_day(export.id, "email_events", DAY)
    kept = world.store.get_export(export.id).dataset_state("email_events")
    assert kept is not None and kept.position_ms == DAY0 + 5 * HOUR_MS
    assert kept.failures == 1 and kept.last_error is not None, "the error stays while late rows are undelivered"
    before = set(read_objects(s3, export.bucket, export.prefix))
    (result,) = [r for r in reconcile(runner, export.id) if r.report is not None]
    assert result.window == W12 and result.report is not None and result.report.sent.resent == 1
    after = set(read_objects(s3, export.bucket, export.prefix))
    new_parts = {k for k in after - before if not k.startswith("_sequenzy/")}  # manifests live there
    assert new_parts <= {parts[-1].key.removeprefix(f"{export.prefix}/")}, "the same name, not a new part"
    audit = audit_export(world.store, world.source_engine, s3, export.id)
    audit.assert_clean()
    cleared = world.store.get_export(export.id).dataset_state("email_events")
    assert cleared is not None and cleared.failures == 0 and cleared.last_error is None
    assert not any(r.report for r in reconcile(runner, export.id)), "nothing owed any more"


def test_a_scheduled_pass_waits_out_the_backoff_of_a_failed_late_window(
    world: World, s3: Any, proxy: fp.FaultProxy
) -> None:
    """Sim seed 10001810. A late-row window's part fails every try: the dataset is in backoff
    (1 h at 1h windows). A scheduled run 59 minutes later, launched for the export's other due
    work, used to retry that window at once; its pass now leaves the dataset alone until the
    wait is over, then sends the part under its own name."""
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 7 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=20)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    insert_rows(world.source_engine, "email_events", late_rows(W12, 4, "late"))
    fault = proxy.add(fp.reset(match=f"-{W12.from_ms}-{W12.to_ms}-", times=None))
    world.clock.now_ms = DAY0 + 4 * HOUR_MS + 3 * MINUTE_MS
    with pytest.raises(RetryableError):
        reconcile(runner, export.id, lateness_ms=DAY_MS, thin=True)
    proxy.remove(fault)
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1 and state.next_retry_at is not None

    def sends_of_w12() -> int:
        return sum(1 for r in proxy.log if r.method == "PUT" and f"-{W12.from_ms}-{W12.to_ms}-" in r.path)

    before = sends_of_w12()
    world.clock.now_ms = state.next_retry_at - MINUTE_MS
    assert not any(r.report for r in reconcile(runner, export.id, lateness_ms=DAY_MS, thin=True))
    assert sends_of_w12() == before, "nothing sent to the bucket inside the wait"
    waiting = world.store.get_export(export.id).dataset_state("email_events")
    assert waiting is not None and waiting.failures == 1 and waiting.reconciled_at == state.reconciled_at

    world.clock.now_ms = state.next_retry_at
    (result,) = [r for r in reconcile(runner, export.id, lateness_ms=DAY_MS, thin=True) if r.report]
    assert result.window == W12 and result.report is not None and result.report.sent.resent == 1
    cleared = world.store.get_export(export.id).dataset_state("email_events")
    assert cleared is not None and cleared.failures == 0
    audit_export(world.store, world.source_engine, s3, export.id).assert_clean()


def test_reconciliation_retries_a_transient_failure_inside_the_run(world: World, s3: Any, proxy: fp.FaultProxy) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=20)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    insert_rows(world.source_engine, "email_events", late_rows(W12, 5, "retry"))
    # Three resets in a row on the late part's PUT: botocore's three tries of one attempt.
    proxy.add(fp.reset(match=f"-{W12.from_ms}-{W12.to_ms}-", times=3))
    try:
        results = reconcile(runner, export.id)
    except ExportError as exc:  # what main did: one attempt, so three resets lost the pass
        pytest.fail(f"reconciliation gave up after one attempt: {exc}")
    assert [(r.window, r.late_rows) for r in results if r.changed] == [(W12, 5)]
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 0 and state.last_error is None
    audit_export(world.store, world.source_engine, s3, export.id).assert_clean()


def all_ids(s3: Any, places: list[tuple[str, str]], dataset: str) -> Counter[str]:
    """Every row id of ``dataset`` in the given (bucket, prefix) places, counted."""
    found: Counter[str] = Counter()
    for bucket, prefix in places:
        for key, body in read_objects(s3, bucket, prefix).items():
            if key.startswith(f"{dataset}/"):
                found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
    return found


def verify_at(world: World, moto: Any, bucket: str, prefix: str, export_id: str, ledger: bool) -> Any:
    return verify_location(
        f"s3://{bucket}/{prefix}",
        s3_endpoint=moto.endpoint,
        access_key_id="AKIAREADER",
        secret_access_key="reader-secret",
        region="us-east-1",
        ledger=(world.store, export_id) if ledger else None,
    )


def test_late_rows_of_a_window_committed_before_a_move_go_to_the_current_location_once(
    world: World, s3: Any, moto: Any, proxy: fp.FaultProxy
) -> None:
    """Issue 22 hole 1: main skipped every window last committed elsewhere; the rows reached neither place."""
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=20)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    old = (export.bucket, export.prefix)
    old_parts = world.store.window_parts(export.id, "email_events", W12, export.location)
    assert old_parts and all(p.landed for p in old_parts)

    # Moved to another bucket; the old one now refuses every write (its key was revoked).
    config, _ = world.store.destination_config(export.id)
    moved = world.store.update_destination(export.id, dc_replace(config, bucket=new_bucket(s3)), world.clock())
    proxy.add(fp.access_denied(match=f"/{old[0]}/", times=None))
    new = (moved.bucket, moved.prefix)
    scheduled(world, runner, export.id, 4)  # (3h, 4h] goes to the new place
    sent_before = len(proxy.puts(f"/{old[0]}/"))

    insert_rows(world.source_engine, "email_events", late_rows(W12, 25, "moved"))
    world.clock.now_ms = DAY0 + 5 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (result,) = [r for r in reconcile(runner, export.id) if r.report is not None]
    assert (result.window, result.late_rows) == (W12, 25)
    assert len(proxy.puts(f"/{old[0]}/")) == sent_before, "nothing is sent to the old place"
    # The late rows are additional parts of W12 under its own name at the new place, numbered on
    # after the parts it has at the old one (25 rows at 20 a part: two parts).
    first = old_parts[-1].number + 1
    names = sorted(
        k for k in read_objects(s3, *new) if f"-{W12.from_ms}-{W12.to_ms}-" in k and not k.startswith("_sequenzy/")
    )
    assert names == [part_key("", "email_events", W12, n).lstrip("/") for n in (first, first + 1)]

    # Every source row exactly once across both places; nothing more on a second pass.
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, DAY0 + 5 * HOUR_MS))
    counted = all_ids(s3, [old, new], "email_events")
    assert set(counted) == expected and max(counted.values()) == 1
    assert not any(r.report for r in reconcile(runner, export.id))
    assert all_ids(s3, [old, new], "email_events") == counted

    # verify accepts both places, with and without the ledger; the new place names the window it continues.
    for place in (old, new):
        for ledger in (False, True):
            report = verify_at(world, moto, *place, export.id, ledger)
            assert report.ok, report.render()
    report = verify_at(world, moto, *new, export.id, False)
    assert report.datasets["email_events"].continued == 1
    assert "continue windows delivered at an earlier location" in report.render()


def test_a_late_row_pass_that_adds_nothing_at_the_new_place_is_not_expected_there(
    world: World, s3: Any, moto: Any, proxy: fp.FaultProxy
) -> None:
    """Sim seed 8002: after a move, reconciliation retried the window of the dataset's last error
    (delivered whole at the old place) at the new one; nothing was left to add, so the attempt
    committed there with no part. `verify --ledger` at the new place then reported the window as
    `ledger_window_missing` ("committed with 0 rows, not in bucket") though nothing was owed there."""
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=20)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    old = (export.bucket, export.prefix)
    config, _ = world.store.destination_config(export.id)
    moved = world.store.update_destination(export.id, dc_replace(config, bucket=new_bucket(s3)), world.clock())
    new = (moved.bucket, moved.prefix)
    scheduled(world, runner, export.id, 4)  # (3h, 4h] goes to the new place

    # What reconciliation does for a window it owes (the last error's): a late-only attempt here.
    report = runner.write_window(export.id, "email_events", W12, late_only=True)
    assert (report.rows, report.parts) == (0, 0)
    here = world.store.ledger(export.id)
    assert any(e.window == W12 and e.status == "committed" for e in here)
    assert not [k for k in read_objects(s3, *new) if f"-{W12.from_ms}-{W12.to_ms}-" in k]

    for place in (old, new):
        report = verify_at(world, moto, *place, export.id, True)
        assert report.ok, report.render()


@pytest.fixture
def create_only(moto: Any) -> Iterator[fp.FaultProxy]:
    """A key that may only create (its refused overwrites are the point, not a failure)."""
    server = fp.FaultProxy(moto.port, write_once=True)
    try:
        yield server
    finally:
        server.close()


def test_a_replace_refused_by_a_create_only_key_at_the_new_place_leaves_no_row_twice(
    world: World, s3: Any, moto: Any, create_only: fp.FaultProxy
) -> None:
    """Sim seed 8005: after a move, late rows of a window delivered at the old place went to the new
    one as parts 0001.. A replace of that day at the new place, on a key that may only create,
    wrote a new 0000 there first (every row of the window, the late ones included) and was then
    refused on 0001: those rows twice at the new place. The replace now overwrites an object that
    is there first, so the refusal comes before anything new lands."""
    proxy = create_only
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, s3, proxy, datasets=EMAIL)
    runner = s3_runner(world, part_limit=1000)
    for hour in (1, 2, 3):
        scheduled(world, runner, export.id, hour)
    config, _ = world.store.destination_config(export.id)
    moved = world.store.update_destination(export.id, dc_replace(config, bucket=new_bucket(s3)), world.clock())
    new = (moved.bucket, moved.prefix)
    scheduled(world, runner, export.id, 4)
    insert_rows(world.source_engine, "email_events", late_rows(W12, 3, "moved"))
    world.clock.now_ms = DAY0 + 5 * HOUR_MS + 3 * MINUTE_MS
    (result,) = [r for r in reconcile(runner, export.id) if r.report is not None]
    assert (result.window, result.late_rows) == (W12, 3)

    def names() -> list[str]:
        return sorted(k for k in read_objects(s3, *new) if f"-{W12.from_ms}-{W12.to_ms}-" in k)

    names_before = names()
    parts_before = [k for k in names_before if not k.startswith("_sequenzy/")]
    assert len(parts_before) == 1 and not parts_before[0].endswith("-0000.jsonl.gz"), parts_before

    with pytest.raises(ExportError, match="may only create"):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    assert names() == names_before, "nothing new lands before the refusal"
    assert proxy.overwrites, "the replace's first write was an overwrite, refused"
    counted = all_ids(s3, [new], "email_events")
    assert counted and max(counted.values()) == 1, "no row twice at the new place"
    # (verify at the new place still reports the windows the replace re-delivered there whole
    # before it reached W12 as a gap and missing parts: known, docs/operators.md.)
