"""Webhooks per account (issue 26 §3), end to end against a real receiver on 127.0.0.1.

Real days run through the runner into moto (an ordinary store and a create-only one behind the fault
proxy); events are recorded by the control plane with the state changes and sent by the dispatcher
through the pinned transport to a receiver thread that checks every signature as the customer docs
say, and lists the bucket when a ``dataset.day_complete`` arrives.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, day_of
from seqexport_dagster.delivery.webhook import signature_header, validate_url, verify_signature
from seqexport_dagster.delivery.webhook_dispatch import MAX_ATTEMPTS, pinned_sender, retry_delay_ms
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ExportError, InvalidInput
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.webhooks_api import Webhooks
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.tables import metadata, webhook_deliveries, webhook_events
from seqexport_dagster.store.webhook_queue import WEBHOOK_RETENTION_MS, prune_webhook_events
from seqexport_dagster.store.webhook_records import (
    DAY_COMPLETE,
    EXPORT_DELETED,
    EXPORT_FAILING,
    EXPORT_PAUSED,
    EXPORT_RECOVERED,
    FAILING_AFTER,
)
from seqexport_dagster_tests.support.faults.proxy import FaultProxy
from seqexport_dagster_tests.support.moto_server import MotoServer
from seqexport_dagster_tests.support.webhook_receiver import Receiver, receiver
from seqexport_dagster_tests.support.world import DAY0, World

LAG = 120_000
SCALE = Scale(subscribers=15, email_sends_per_hour=6, sms_sends_per_hour=2, custom_per_hour=2)


def hooks(world: World, **kwargs: Any) -> Webhooks:
    return Webhooks(world.control_engine, world.box, world.policy, clock=world.clock, **kwargs)


def subscribe(
    world: World, rx: Receiver, account: str = "acme", events: str | None = None, failing_after: int | None = None
) -> str:
    added = hooks(world).add(account_id=account, url=rx.url, events=events, failing_after=failing_after)
    rx.secret = added.secret
    return added.endpoint.id


def drain(world: World, rounds: int = MAX_ATTEMPTS + 2) -> None:
    """Dispatch until nothing is due, moving the clock past each retry's wait."""
    for _ in range(rounds):
        report = hooks(world).dispatch(limit=100)
        if not report.retrying:
            return
        world.clock.advance(retry_delay_ms(MAX_ATTEMPTS))


@pytest.fixture(params=[False, True], ids=["ordinary", "create-only"])
def proxy(request: pytest.FixtureRequest, moto: MotoServer) -> Iterator[FaultProxy]:
    p = FaultProxy(moto.port, write_once=request.param)
    try:
        yield p
    finally:
        p.close()


def s3_export(world: World, moto: MotoServer, endpoint: str, datasets: tuple[str, ...], *, create: bool = True) -> Any:
    bucket = f"hooks-{secrets.token_hex(5)}"
    if create:
        moto.admin_client().create_bucket(Bucket=bucket)
    config = DestinationConfig(
        "s3", bucket, prefix="sequenzy", region="us-east-1", endpoint=endpoint,
        access_key_id="AKIAHOOKS00000000001", secret_access_key="hooks-bucket-secret-0001",
    )  # fmt: skip
    return world.store.create_export(
        account_id="acme", destination=config, datasets=datasets, frequency="1h", lag_ms=LAG, now_ms=world.clock()
    )


def bucket_folder(s3: Any, bucket: str, folder: str) -> dict[str, Any]:
    """What a customer's receiver finds under the event's folder right now."""
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=folder).get("Contents", [])
    parts = [o for o in listing if not o["Key"].endswith("/_SUCCESS")]
    rows = sum(
        len(gzip.decompress(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()).splitlines()) for o in parts
    )
    return {
        "objects": len(listing),  # everything under the folder, ``_SUCCESS`` included (docs/customers.md)
        "rows": rows,
        "bytes": sum(o["Size"] for o in parts),
        "success": any(o["Key"].endswith("/_SUCCESS") for o in listing),
    }


def test_day_complete_fires_once_per_dataset_day_and_only_after_its_objects_exist(
    world: World, moto: MotoServer, proxy: FaultProxy
) -> None:
    s3 = moto.admin_client()
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=SCALE)
    export = s3_export(world, moto, proxy.endpoint, ("email_events", "subscribers"))
    hour_of: dict[str, int] = {}

    def look(event: dict[str, Any]) -> Any:
        if event["type"] != DAY_COMPLETE:
            return None
        hour_of.setdefault(event["id"], hour)
        return bucket_folder(s3, event["data"]["bucket"], event["data"]["folder"])

    with receiver(fail_first=2, on_event=look) as rx:
        subscribe(world, rx)
        runner = world.runner(part_limit=7)
        for hour in range(1, 50):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
            for day in (day_of(DAY0), day_of(DAY0 + DAY_MS)):
                for dataset in ("email_events", "subscribers"):
                    runner.run_day(export.id, dataset, day)
            drain(world)
        drain(world)

    assert rx.requests and all(r.signature_ok for r in rx.requests)
    done = rx.accepted(DAY_COMPLETE)
    by_day = sorted((r.event["data"]["dataset"], r.event["data"]["date"]) for r in done)
    assert by_day == [
        ("email_events", "2026-09-30"),
        ("email_events", "2026-10-01"),
        ("subscribers", "2026-09-30"),
        ("subscribers", "2026-10-01"),
    ], "once per dataset-day"
    with world.control_engine.connect() as conn:
        recorded = conn.execute(sa.select(sa.func.count()).where(webhook_events.c.type == DAY_COMPLETE)).scalar()
    assert recorded == 4, "the outbox never records a dataset-day twice"
    for r in done:
        data = r.event["data"]
        # At receive time the bucket already holds every object the event announces, with its rows.
        assert r.seen == {
            "objects": data["objects"],
            "rows": data["rows"],
            "bytes": data["bytes"],
            "success": data["dataset"] == "subscribers",
        }, data
        assert data["objects"] > 0 and data["rows"] > 0 and data["export_id"] == export.id
        if data["dataset"] == "email_events":
            assert data["windows"] == 24
            # The day's last window is committed at hour 24 (day 1) or 48 (day 2), never before.
            assert hour_of[r.event["id"]] >= (24 if data["date"] == "2026-09-30" else 48)
        else:
            assert data["success_key"] == f"sequenzy/subscribers/date={data['date']}/_SUCCESS"
    assert proxy.overwrites == []


def test_a_receiver_that_fails_for_a_while_still_gets_the_event(world: World) -> None:
    export = world.local_export()
    with receiver(fail_first=4) as rx:
        webhook_id = subscribe(world, rx)
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        first = hooks(world).dispatch()
        assert (first.attempted, first.retrying) == (1, 1)
        waits = []
        for _ in range(4):
            (delivery,) = hooks(world).deliveries(webhook_id)
            assert delivery.next_attempt_at is not None
            waits.append(delivery.next_attempt_at - world.clock())
            world.clock.now_ms = delivery.next_attempt_at
            hooks(world).dispatch()
    (delivery,) = hooks(world).deliveries(webhook_id)
    assert delivery.status == "delivered" and delivery.attempts == 5
    assert [a.status_code for a in delivery.log] == [503, 503, 503, 503, 200]
    assert waits == [retry_delay_ms(n) for n in range(1, 5)] and waits == sorted(waits), "exponential backoff"
    ids = {r.event["id"] for r in rx.requests}
    assert len(ids) == 1 and rx.requests[-1].event["type"] == EXPORT_PAUSED
    assert rx.requests[-1].headers["Sequenzy-Event-Id"] == ids.pop()
    assert all(r.signature_ok for r in rx.requests)


def test_attempts_are_bounded_then_the_delivery_is_failed(world: World) -> None:
    export = world.local_export()
    with receiver(fail_first=1000, fail_status=500) as rx:
        webhook_id = subscribe(world, rx)
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        for _ in range(MAX_ATTEMPTS + 3):
            hooks(world).dispatch()
            world.clock.advance(retry_delay_ms(MAX_ATTEMPTS))
    (delivery,) = hooks(world).deliveries(webhook_id)
    assert delivery.status == "failed" and delivery.attempts == MAX_ATTEMPTS
    assert len(rx.requests) == MAX_ATTEMPTS and delivery.next_attempt_at is None


def test_paused_deleted_failing_and_recovered_fire(world: World, moto: MotoServer) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 6 * HOUR_MS, scale=SCALE)
    export = s3_export(world, moto, moto.endpoint, ("email_events",), create=False)  # no such bucket yet
    api = Exports(world.store, world.policy, clock=world.clock)
    runner = world.runner()
    with receiver() as rx, receiver() as paused_only, receiver() as eager, receiver() as patient:
        subscribe(world, rx)
        subscribe(world, paused_only, events=EXPORT_PAUSED)
        subscribe(world, eager, events=f"{EXPORT_FAILING},{EXPORT_RECOVERED}", failing_after=1)
        subscribe(world, patient, events=f"{EXPORT_FAILING},{EXPORT_RECOVERED}", failing_after=10)
        world.clock.now_ms = DAY0 + HOUR_MS + LAG
        for attempt in range(1, FAILING_AFTER + 2):
            with pytest.raises(ExportError):
                runner.run_day(export.id, "email_events", day_of(DAY0))
            drain(world)
            failing = rx.accepted(EXPORT_FAILING)
            assert len(failing) == (0 if attempt < FAILING_AFTER else 1), attempt
            assert len(eager.accepted(EXPORT_FAILING)) == 1, "failing_after=1: at the first failure, once"
            world.clock.advance(6 * HOUR_MS)
        assert eager.accepted(EXPORT_FAILING)[0].event["data"]["failures"] == 1
        (event,) = (r.event for r in rx.accepted(EXPORT_FAILING))
        assert event["data"]["failures"] == FAILING_AFTER and event["data"]["dataset"] == "email_events"
        assert "bucket" in event["data"]["error"].lower()
        moto.admin_client().create_bucket(Bucket=api.get(export.id).bucket)
        runner.run_day(export.id, "email_events", day_of(DAY0))
        drain(world)
        (recovered,) = rx.accepted(EXPORT_RECOVERED)
        assert recovered.event["data"] == {"export_id": export.id, "dataset": "email_events", "failures": 4}
        assert [r.event["type"] for r in eager.accepted()] == [EXPORT_FAILING, EXPORT_RECOVERED]
        assert patient.accepted() == [], "4 failures never reached failing_after=10: no failing, no recovered"
        api.pause(export.id)
        api.resume(export.id)
        # Sent before the delete is recorded: two due events to one webhook may be in flight together
        # (`ENDPOINT_IN_FLIGHT`) and arrive in either order (docs/customers.md, "Delivery").
        drain(world)
        api.delete(export.id)
        drain(world)
    kinds = [r.event["type"] for r in rx.accepted()]
    # The clock had passed the day's end: the recovering run delivered all of it, so the day completed.
    assert kinds == [EXPORT_FAILING, EXPORT_RECOVERED, DAY_COMPLETE, EXPORT_PAUSED, EXPORT_DELETED]
    assert [r.event["type"] for r in paused_only.accepted()] == [EXPORT_PAUSED], "an endpoint gets only its types"
    assert all(r.signature_ok for r in rx.requests + paused_only.requests)


def test_the_secret_never_appears_in_logs_output_or_the_delivery_log(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    export = world.local_export()
    with receiver(fail_first=1) as rx:
        subscribe(world, rx)
        webhook_id = hooks(world).list("acme")[0].id
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        drain(world)
        queued = hooks(world).test(webhook_id)
        assert queued.status == "pending" and queued.log == (), "queued, never sent on the caller's thread"
        drain(world)
        (tested, *_) = hooks(world).deliveries(webhook_id)
    assert tested.status == "delivered" and rx.requests[-1].event["type"] == "webhook.test"
    secret = rx.secret
    shown = [repr(hooks(world).list("acme")), repr(hooks(world).deliveries(webhook_id)), caplog.text]
    with world.control_engine.connect() as conn:
        for table in metadata.sorted_tables:
            shown.append(repr(conn.execute(sa.select(table)).all()))
    assert "webhook delivery" in caplog.text, "the dispatcher does log its deliveries"
    for text in shown:
        assert secret not in text and secret.removeprefix("whsec_") not in text
    assert (world.root / "control.db").read_bytes().find(secret.encode()) == -1


def test_urls_pass_the_bucket_endpoint_rules() -> None:
    public = OperatorPolicy()
    assert (
        validate_url("https://Hooks.Example.com/in/sequenzy?k=1", public) == "https://hooks.example.com/in/sequenzy?k=1"
    )
    assert validate_url("https://hooks.example.com:443", public) == "https://hooks.example.com/"
    refused = {
        "http://hooks.example.com/x": "https://",
        "https://127.0.0.1/x": "IP address literal",
        "https://2130706433/x": "IP address literal",
        "https://[::ffff:127.0.0.1]/x": "IPv6",
        "https://localhost/x": "local or internal",
        "https://metadata.google.internal/x": "local or internal",
        "https://user:pw@hooks.example.com/x": "user name or password",
        "https://hooks.example.com:8443/x": "port 8443",
        "https://hooks.example.com/x#frag": "fragment",
        "": "give the https:// URL",
    }
    for url, words in refused.items():
        with pytest.raises(InvalidInput) as caught:
            validate_url(url, public)
        assert caught.value.field == "url" and words in caught.value.problem, (url, caught.value.problem)
    with pytest.raises(InvalidInput) as caught:
        validate_url("https://10.0.0.1/x", public)
    assert "r2.cloudflarestorage" not in caught.value.problem and "hooks.example.com" in caught.value.problem
    local = OperatorPolicy(allow_local=True)
    assert validate_url("http://127.0.0.1:8123/hook", local) == "http://127.0.0.1:8123/hook"


def test_a_name_that_resolves_to_a_private_address_is_refused_at_connect_time(world: World) -> None:
    """The URL passed the save-time rules; at send time it resolves to loopback: nothing is sent."""
    export = world.local_export()
    with receiver() as rx:
        added = hooks(world).add(account_id="acme", url="https://hooks.example.com/in")
        rebinding = pinned_sender(OperatorPolicy(), resolver=lambda host, port: ["127.0.0.1"])
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        hooks(world, sender=rebinding).dispatch()
    (delivery,) = hooks(world).deliveries(added.endpoint.id)
    assert delivery.status == "pending" and delivery.log[0].status_code is None
    assert "non-public address" in (delivery.log[0].error or "")
    assert rx.requests == []


def test_signature_scheme_matches_the_customer_docs() -> None:
    body = b'{"id":"evt_1"}'
    header = signature_header("whsec_test", 1_700_000_000, body)
    assert header.startswith("t=1700000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify_signature("whsec_test", header, body, now_s=1_700_000_100)
    assert not verify_signature("whsec_test", header, body + b" ", now_s=1_700_000_100)
    assert not verify_signature("whsec_other", header, body, now_s=1_700_000_100)
    assert not verify_signature("whsec_test", header, body, now_s=1_700_000_000 + 301), "an old t is a replay"
    # The docs' receiver snippet, run as written, agrees.
    text = (Path(__file__).parents[1] / "docs" / "customers.md").read_text()
    section = text[text.index("### Verify a webhook") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)
    verify = namespace["verify"]
    now_header = signature_header("whsec_test", int(time.time()), body)
    assert verify(body, now_header, "whsec_test") is True
    assert verify(body, now_header, "whsec_other") is False
    assert verify(body, header, "whsec_test") is False, "the docs' snippet refuses an old timestamp"
    # Hostile headers: False from both, never an exception (int("²") and compare_digest("é") raise).
    now = int(time.time())
    good = signature_header("whsec_test", now, body).split("v1=")[1]
    for hostile in ("t=²", "t=²,v1=" + good, f"t={now},v1=é", f"t={now},v1={good[:-1]}é", "t=١٢٣,v1=ab", "v1=é"):
        assert verify(body, hostile, "whsec_test") is False, hostile
        assert verify_signature("whsec_test", hostile, body) is False, hostile


def test_maintain_prunes_old_finished_events_and_keeps_pending_ones(world: World) -> None:
    from seqexport_dagster.store.maintenance import maintain

    export = world.local_export()
    other = world.local_export(folder="other")
    with receiver() as rx:
        subscribe(world, rx)
        api = Exports(world.store, world.policy, clock=world.clock)
        api.pause(export.id)
        drain(world)  # delivered
        api.pause(other.id)  # still pending: never dispatched
    world.clock.advance(WEBHOOK_RETENTION_MS + DAY_MS)
    report = maintain(world.control_engine, world.clock())
    assert report.webhook_events == 1 and report.as_dict()["webhook_events_removed"] == 1
    with world.control_engine.connect() as conn:
        left = conn.execute(sa.select(webhook_deliveries.c.status)).scalars().all()
    assert left == ["pending"]
    assert prune_webhook_events(world.control_engine, world.clock()) == 0, "a second pass removes nothing"


def test_webhook_bodies_are_recorded_once_and_resent_byte_for_byte(world: World) -> None:
    export = world.local_export()
    with receiver(fail_first=2) as rx:
        subscribe(world, rx)
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        drain(world)
    bodies = {json.dumps(r.event, sort_keys=True) for r in rx.requests}
    assert len(rx.requests) == 3 and len(bodies) == 1
    event = rx.requests[0].event
    assert event["account_id"] == "acme" and event["data"] == {"export_id": export.id, "status": "paused"}


def test_rotate_keys_reseals_webhook_secrets_so_the_old_key_can_go(world: World) -> None:
    export = world.local_export()
    with receiver() as rx:
        subscribe(world, rx)
        old_spec = f"t1:{base64.b64encode(world.box.keys['t1']).decode()}"
        new_spec = new_key_spec("t2")
        world.store.box = SecretBox.parse(f"{new_spec},{old_spec}")
        world.box = world.store.box
        report = Exports(world.store, world.policy, clock=world.clock).rotate_keys()
        assert report.failed == [] and report.resealed >= 1
        world.box = world.store.box = SecretBox.parse(new_spec)  # the old key is dropped
        Exports(world.store, world.policy, clock=world.clock).pause(export.id)
        drain(world)
    assert [r.signature_ok for r in rx.requests] == [True]


def test_the_simulator_webhook_oracle_sees_a_duplicate_a_lost_and_an_early_event(tmp_path: Path) -> None:
    """Invariant 7 of the seeded simulator can fail: a second event for a dataset-day, a missing one,
    and one whose objects are not in the bucket are each reported."""
    from dataclasses import replace

    from seqexport_dagster_tests.support.sim.oracles import Violation
    from seqexport_dagster_tests.support.sim.webhook_oracle import WebhookOracle
    from seqexport_dagster_tests.support.sim.world import World as SimWorld

    world = SimWorld(21, tmp_path, days=1, level=0.0, only=("none",))
    try:
        while world.clock() < world.end_ms + world.lateness_ms + 2 * DAY_MS:
            before = world.clock()
            world.clock.advance(600_000)
            if before < world.end_ms:
                world.source.feed(world.accounts, world.clock(), before)
            world.tick()
        assert WebhookOracle().check(world, Violation) == []
        with world.engine.begin() as conn:
            events = conn.execute(sa.select(webhook_events).where(webhook_events.c.type == DAY_COMPLETE)).all()
            assert len(events) >= 2
            copy = dict(events[0]._mapping) | {"id": "evt_planted_copy", "dedup_key": None}
            conn.execute(webhook_events.insert().values(**copy))
            conn.execute(webhook_events.delete().where(webhook_events.c.id == events[1].id))
        lost = json.loads(events[1].body)["data"]
        e = next(x for x in world.exports.values() if x.export_id == json.loads(events[0].body)["data"]["export_id"])
        bucket = world.buckets.get(e.place.bucket)
        folder = json.loads(events[0].body)["data"]["folder"]
        bucket.writes = [w if not w.key.startswith(folder) else replace(w, answer="denied") for w in bucket.writes]
        found = [v.detail for v in WebhookOracle().check(world, Violation)]
        assert any("2 day_complete events" in d for d in found), found
        assert any(f"no day_complete for {lost['dataset']} {lost['date']}" in d for d in found), found
        assert any("is not in the bucket" in d or "_SUCCESS was not" in d for d in found), found
    finally:
        world.dispose()


@pytest.mark.postgres
def test_the_dispatchers_query_stays_on_its_index(tmp_path: Path) -> None:
    """50,000 finished deliveries and a few pending: the dispatcher's query (captured as it runs)
    and the retention's are ``EXPLAIN``-ed on PostgreSQL and scan neither table sequentially."""
    from sqlalchemy import event

    from seqexport_dagster.store.tables import webhook_endpoints
    from seqexport_dagster.store.webhooks import WebhookStore
    from seqexport_dagster_tests.support.world import postgres_world

    with postgres_world(tmp_path) as world:
        now = world.clock()
        with world.control_engine.begin() as conn:
            conn.execute(webhook_endpoints.insert().values(
                id="whk_00000000000000aa", account_id="acme", url="https://h.example.com/", events="*",
                description="", secret_ciphertext="x", created_at=now,
            ))  # fmt: skip
            events = [
                {
                    "id": f"evt_{n:024x}",
                    "account_id": "acme",
                    "type": EXPORT_PAUSED,
                    "body": "{}",
                    "created_at": now - n,
                }
                for n in range(50_000)
            ]
            conn.execute(webhook_events.insert(), events)
            conn.execute(
                webhook_deliveries.insert(),
                [
                    {
                        "event_id": e["id"], "endpoint_id": "whk_00000000000000aa", "account_id": "acme",
                        "status": "pending" if n % 10_000 == 0 else "delivered", "attempts": 1,
                        "next_attempt_at": now - n, "created_at": now - n,
                    }
                    for n, e in enumerate(events)
                ],
            )  # fmt: skip
            conn.execute(sa.text("ANALYZE webhook_events; ANALYZE webhook_deliveries"))
        seen: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            if statement.lstrip().upper().startswith("SELECT") and "webhook_deliveries" in statement:
                seen.append((statement, parameters))

        event.listen(world.control_engine, "before_cursor_execute", capture)
        try:
            due = WebhookStore(world.control_engine, world.box).due_deliveries(now, 20)
        finally:
            event.remove(world.control_engine, "before_cursor_execute", capture)
        assert len(due) == 5 and seen
        with world.control_engine.connect() as conn:
            for statement, parameters in seen:
                plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement, parameters))
                assert "Seq Scan on webhook_deliveries" not in plan, plan
                assert "ix_webhook_deliveries_due" in plan, plan
            old = now - WEBHOOK_RETENTION_MS
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    sa.text("EXPLAIN SELECT id FROM webhook_events WHERE created_at < :c"), {"c": old}
                )
            )
            assert "Seq Scan on webhook_events" not in plan, plan
