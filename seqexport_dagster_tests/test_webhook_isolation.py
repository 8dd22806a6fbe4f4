"""One account's webhooks never slow another's (issue 41 §1), and the smaller delivery rules of §5.

Real receivers on 127.0.0.1 (one that never answers, one that always fails, one that answers a
large body), the real pinned sender, the control plane on SQLite: the dispatcher's turns across
accounts, its caps in flight, its bounded call, the circuit breaker and its re-enabling, the pending
cap, the rate limits on test sends and adds, the bounded name lookup, and which answers count.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from seqexport_dagster.cli.render import Output
from seqexport_dagster.cli.webhooks import endpoint_list
from seqexport_dagster.delivery.webhook_dispatch import (
    ACCOUNT_IN_FLIGHT,
    BREAKER_FAILURES,
    ENDPOINT_IN_FLIGHT,
    MAX_ANSWER_BYTES,
    MAX_ATTEMPTS,
    dispatch,
    pinned_sender,
    retry_delay_ms,
)
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ConflictError, RateLimited
from seqexport_dagster.management.webhook_presentation import webhook_json
from seqexport_dagster.management.webhooks_api import Webhooks
from seqexport_dagster.store.outbox import MAX_PENDING_PER_ACCOUNT, emit
from seqexport_dagster.store.rate_limit import WEBHOOK_ADD, WEBHOOK_TEST
from seqexport_dagster.store.tables import webhook_deliveries
from seqexport_dagster.store.webhook_records import DROPPED, EXPORT_PAUSED, PENDING
from seqexport_dagster.store.webhooks import WebhookStore
from seqexport_dagster_tests.support.webhook_receiver import Receiver, receiver
from seqexport_dagster_tests.support.world import World


def hooks(world: World) -> Webhooks:
    return Webhooks(world.control_engine, world.box, world.policy, clock=world.clock)


def store(world: World) -> WebhookStore:
    return WebhookStore(world.control_engine, world.box)


def subscribe(world: World, rx: Receiver, account: str) -> str:
    added = hooks(world).add(account_id=account, url=rx.url)
    rx.secret = added.secret
    return added.endpoint.id


def events(world: World, account: str, count: int) -> None:
    """``count`` events of ``account``, each fanned out to its endpoints, as a state change records them."""
    with world.control_engine.begin() as conn:
        for n in range(count):
            emit(conn, account_id=account, kind=EXPORT_PAUSED, data={"n": n}, now_ms=world.clock())


def statuses(world: World, account: str) -> dict[str, int]:
    d = webhook_deliveries.c
    with world.control_engine.connect() as conn:
        rows = conn.execute(
            sa.select(d.status, sa.func.count()).where(d.account_id == account).group_by(d.status)
        ).all()
    return {status: int(n) for status, n in rows}


def test_an_account_flooding_a_receiver_that_never_answers_does_not_delay_another(world: World) -> None:
    """900 deliveries of one account, due first, to 3 endpoints that never answer; one fresh delivery
    of another account. One bounded call sends the second account's delivery, holds at most
    `ENDPOINT_IN_FLIGHT` connections per endpoint and `ACCOUNT_IN_FLIGHT` for the account, and ends
    within its budget plus one send's deadline. (The old dispatcher sent oldest first, one at a
    time: the other account's delivery waited behind all 900.)"""
    stuck = [receiver(hang=True) for _ in range(3)]
    held = [s.__enter__() for s in stuck]
    try:
        with receiver() as fine:
            for rx in held:
                subscribe(world, rx, "flood")
            subscribe(world, fine, "acme")
            events(world, "flood", 300)
            world.clock.advance(60_000)
            events(world, "acme", 1)
            began = time.monotonic()
            report = dispatch(
                store(world), pinned_sender(world.policy, deadline_s=1.5), world.clock, limit=50, budget_s=0.5
            )
            took = time.monotonic() - began
            assert [r.event["account_id"] for r in fine.accepted()] == ["acme"]
            assert all(r.signature_ok for r in fine.requests)
    finally:
        for s in stuck:
            s.__exit__(None, None, None)
    assert took < 0.5 + 1.5 + 1.5, took
    assert all(rx.most_held <= ENDPOINT_IN_FLIGHT for rx in held), [rx.most_held for rx in held]
    # The first wave only (the budget passed before any hanging send ended): the flooding account's
    # share, and the other account's one delivery.
    assert report.attempted == ACCOUNT_IN_FLIGHT + 1 and report.delivered == 1, report
    assert statuses(world, "acme") == {"delivered": 1}


def test_the_circuit_breaker_disables_a_failing_endpoint_until_its_customer_enables_it(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    with receiver(fail_first=10**6) as rx:
        webhook_id = subscribe(world, rx, "acme")
        events(world, "acme", 8)
        api = hooks(world)
        for _ in range(4):
            dispatch(store(world), pinned_sender(world.policy), world.clock, limit=100)
            world.clock.advance(retry_delay_ms(MAX_ATTEMPTS))
        sent = len(rx.requests)
        # The attempt that trips it may have company in flight on the same endpoint.
        assert BREAKER_FAILURES <= sent < BREAKER_FAILURES + ENDPOINT_IN_FLIGHT, sent
        (endpoint,) = api.list("acme")
        assert not endpoint.enabled and endpoint.consecutive_failures >= BREAKER_FAILURES
        assert f"after {BREAKER_FAILURES} failed attempts in a row (the last: HTTP 503)" in str(
            endpoint.disabled_reason
        )
        shown = webhook_json(endpoint)
        assert shown["status"] == "disabled" and shown["disabled_at"] is not None
        endpoint_list(Output(as_json=False), [endpoint])  # what `seqexport webhooks list` prints
        listed = capsys.readouterr().out
        assert "disabled 2026-" in listed and f"seqexport webhooks enable {webhook_id}" in listed
        assert statuses(world, "acme") == {PENDING: 8}, "its deliveries wait; none is lost"
        with pytest.raises(ConflictError, match="enable it first"):
            api.test(webhook_id)
        report = dispatch(store(world), pinned_sender(world.policy), world.clock, limit=100)
        assert report.attempted == 0 and len(rx.requests) == sent, "nothing is sent while disabled"

        rx.fail_first = 0
        enabled = api.enable(webhook_id)
        assert enabled.enabled and enabled.consecutive_failures == 0 and enabled.disabled_reason is None
        dispatch(store(world), pinned_sender(world.policy), world.clock, limit=100)
    assert statuses(world, "acme") == {"delivered": 8}
    assert len(rx.accepted()) == 8 and all(r.signature_ok for r in rx.requests)


def test_an_accounts_pending_deliveries_are_capped_and_past_the_cap_dropped(world: World) -> None:
    with receiver() as rx, receiver() as other:
        webhook_id = subscribe(world, rx, "acme")
        subscribe(world, other, "globex")
        events(world, "acme", MAX_PENDING_PER_ACCOUNT + 3)
        events(world, "globex", 2)
        assert statuses(world, "acme") == {PENDING: MAX_PENDING_PER_ACCOUNT, DROPPED: 3}
        assert statuses(world, "globex") == {PENDING: 2}, "the cap is per account"
        with pytest.raises(RateLimited, match=f"{MAX_PENDING_PER_ACCOUNT} webhook deliveries waiting"):
            hooks(world).test(webhook_id)
        dropped = [d for d in hooks(world).deliveries(webhook_id, limit=5) if d.status == DROPPED]
        assert len(dropped) == 3 and all(d.log == () and d.next_attempt_at is None for d in dropped)


def test_test_sends_and_adds_are_rate_limited_per_account(world: World) -> None:
    with receiver() as rx:
        webhook_id = subscribe(world, rx, "acme")
        api = hooks(world)
        for _ in range(WEBHOOK_TEST.limit):
            assert api.test(webhook_id).status == PENDING
        with pytest.raises(RateLimited) as refused:
            api.test(webhook_id)
        assert "10 webhook test sends in the last 10 minutes" in refused.value.message
        assert refused.value.retry_after_ms > 0
        assert rx.requests == [], "a test is queued, never sent by the call"
        other = subscribe(world, rx, "globex")
        assert api.test(other).status == PENDING, "another account's limit is its own"
        world.clock.advance(WEBHOOK_TEST.window_ms)
        assert api.test(webhook_id).status == PENDING, "the window rolls"
        for _ in range(WEBHOOK_ADD.limit - 1):  # one add already made
            api.remove(api.add(account_id="acme", url=rx.url).endpoint.id)
        with pytest.raises(RateLimited, match="20 webhook adds in the last 60 minutes"):
            api.add(account_id="acme", url=rx.url)


def test_a_webhook_host_whose_name_never_resolves_costs_one_deadline(world: World) -> None:
    """The name lookup runs under the bucket destinations' bounded resolver, inside the attempt's
    deadline (the old sender waited for the resolver: 30 s for a planted slow name)."""

    def slow(host: str, port: int) -> list[str]:
        time.sleep(6)
        return ["127.0.0.1"]

    send = pinned_sender(OperatorPolicy(allow_local=True), deadline_s=1.0, resolver=slow)
    began = time.monotonic()
    result = send("http://hooks.example.com:8123/in", {"Content-Type": "application/json"}, b"{}")
    took = time.monotonic() - began
    assert took < 2.5, took
    assert result.status_code is None and "hooks.example.com" in (result.error or "")


@pytest.mark.parametrize(("status", "final"), [(400, True), (404, True), (410, True), (408, False), (429, False)])
def test_a_4xx_that_cannot_change_fails_at_once_and_408_429_are_retried(world: World, status: int, final: bool) -> None:
    with receiver(fail_first=10**6, fail_status=status) as rx:
        webhook_id = subscribe(world, rx, "acme")
        events(world, "acme", 1)
        report = dispatch(store(world), pinned_sender(world.policy), world.clock)
    (delivery,) = hooks(world).deliveries(webhook_id)
    assert delivery.attempts == 1 and delivery.log[0].status_code == status
    assert (delivery.status, report.failed, report.retrying) == (("failed", 1, 0) if final else (PENDING, 0, 1))


def test_a_2xx_with_an_answer_over_the_cap_counts_as_delivered(world: World) -> None:
    with receiver(answer_bytes=MAX_ANSWER_BYTES * 3) as rx:
        webhook_id = subscribe(world, rx, "acme")
        events(world, "acme", 1)
        report = dispatch(store(world), pinned_sender(world.policy), world.clock)
    (delivery,) = hooks(world).deliveries(webhook_id)
    assert report.delivered == 1 and delivery.status == "delivered" and delivery.log[0].status_code == 200
