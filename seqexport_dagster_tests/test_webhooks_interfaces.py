"""Webhooks where people and Dagster meet them: the CLI (local on SQLite and PostgreSQL, and remote
through the HTTP API), the HTTP API's account isolation, Idempotency-Key and body rules, and the
Dagster sensor that sends due deliveries. A real receiver on 127.0.0.1 checks every signature."""

from __future__ import annotations

from typing import Any

import dagster as dg
import httpx
import sqlalchemy as sa

from seqexport_dagster.cli.exits import EXIT_BAD_INPUT, EXIT_NOT_FOUND
from seqexport_dagster.contract.window import DAY_MS, day_of
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.store.tables import idempotency_keys
from seqexport_dagster_tests.support.api_server import mint, serve_thread
from seqexport_dagster_tests.support.cli_harness import Cli, run_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.webhook_receiver import receiver
from seqexport_dagster_tests.support.world import DAY0, World


def test_webhooks_through_the_cli(run: Cli) -> None:
    with receiver() as rx:
        added = run.ok(
            "webhooks", "add", "--account", "acme", "--url", rx.url, "--events", "export.paused", "--failing-after", "5"
        )
        rx.secret = added["secret"]
        assert (
            added["id"].startswith("whk_") and rx.secret.startswith("whsec_") and added["events"] == ["export.paused"]
        )
        assert added["failing_after"] == 5
        webhook_id = added["id"]
        listed = run.ok("webhooks", "list", "--account", "acme")
        assert [w["id"] for w in listed] == [webhook_id] and "secret" not in listed[0]
        tested = run.ok("webhooks", "test", webhook_id)
        assert tested[0]["status"] == "pending" and tested[0]["log"] == [], "queued, not sent by the command"
        assert rx.requests == []
        assert run.ok("webhooks", "dispatch")["delivered"] == 1
        listed = run.ok("webhooks", "list", "--account", "acme")
        assert listed[0]["status"] == "enabled" and listed[0]["consecutive_failures"] == 0
        rotated = run.ok("webhooks", "rotate-secret", webhook_id)
        assert rotated["id"] == webhook_id and rotated["secret"].startswith("whsec_") and rotated["secret"] != rx.secret
        rx.secret = rotated["secret"]
        export = run.create_local()
        run.ok("pause", export["id"])
        assert run.ok("webhooks", "dispatch")["delivered"] == 1
        log = run.ok("webhooks", "deliveries", webhook_id)
        assert [(d["event_type"], d["status"]) for d in log] == [
            ("export.paused", "delivered"),
            ("webhook.test", "delivered"),
        ]
        human = run("webhooks", "deliveries", webhook_id)
        assert human.code == 0 and "export.paused" in human.out and "delivered" in human.out
    assert [r.event["type"] for r in rx.requests] == ["webhook.test", "export.paused"]
    assert all(r.signature_ok for r in rx.requests)

    bad = run("webhooks", "add", "--account", "acme", "--url", "ftp://hooks.example.com/x", "--json")
    assert bad.code == EXIT_BAD_INPUT and bad.json["error"]["field"] == "url"
    bad = run("webhooks", "add", "--account", "acme", "--url", rx.url, "--events", "export.exploded", "--json")
    assert bad.code == EXIT_BAD_INPUT and bad.json["error"]["field"] == "events"
    assert "export.failing" in bad.json["error"]["message"], "says what is accepted"
    for wrong in ("0", "101", "three", "2.5"):
        bad = run("webhooks", "add", "--account", "acme", "--url", rx.url, "--failing-after", wrong, "--json")
        assert bad.code == EXIT_BAD_INPUT and bad.json["error"]["field"] == "failing_after", wrong
        assert "1 to 100" in bad.json["error"]["message"]
    bad = run("webhooks", "test", "nope", "--json")
    assert bad.code == EXIT_BAD_INPUT and bad.json["error"]["field"] == "webhook_id"
    bad = run("webhooks", "test", "--json")
    assert bad.code == EXIT_BAD_INPUT and bad.json["error"]["field"] == "webhook_id"
    removed = run.ok("webhooks", "remove", webhook_id)
    assert removed["deleted_at"] is not None and run.ok("webhooks", "list") == []
    gone = run("webhooks", "test", webhook_id, "--json")
    assert gone.code == EXIT_NOT_FOUND
    # The delivery log of a removed webhook stays readable.
    assert len(run.ok("webhooks", "deliveries", webhook_id)) == 2
    shown_by = [call for call in run.calls if rx.secret in call.out + call.err]
    assert len(shown_by) == 1 and shown_by[0].json["secret"] == rx.secret, (
        "the new secret is shown once, by rotate-secret"
    )


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60)


def test_the_http_api_keeps_accounts_apart(world: World) -> None:
    exports = Exports(world.store, world.policy, clock=world.clock)
    with serve_thread(exports) as server, receiver() as rx:
        acme = _client(server.url, mint(exports, "acme"))
        other = _client(server.url, mint(exports, "globex"))
        operator = _client(server.url, mint(exports, None))
        first = acme.post("/v1/webhooks", json={"url": rx.url}, headers={"Idempotency-Key": "hook-1"})
        assert first.status_code == 201, first.text
        created = first.json()
        rx.secret = created["secret"]
        assert created["account_id"] == "acme" and created["events"] == ["*"] and created["failing_after"] == 3
        wrong = acme.post("/v1/webhooks", json={"url": rx.url, "failing_after": 0})
        assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "failing_after", wrong.text
        again = acme.post("/v1/webhooks", json={"url": rx.url}, headers={"Idempotency-Key": "hook-1"})
        assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["id"] == created["id"] and again.json()["secret"] is None, "the secret is shown once"
        with world.control_engine.connect() as conn:
            kept = conn.execute(sa.select(idempotency_keys.c.body)).scalars().all()
        assert kept and all(rx.secret not in (b or "") for b in kept)
        webhook = f"/v1/webhooks/{created['id']}"
        missing = "/v1/webhooks/whk_00000000000000ff"
        for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/test"), ("GET", "/deliveries")):
            theirs = other.request(method, webhook + suffix)
            nothing = other.request(method, missing + suffix)
            assert theirs.status_code == nothing.status_code == 404, (method, suffix)
            shown = theirs.json()["error"]["message"].replace(created["id"], "ID")
            assert shown == nothing.json()["error"]["message"].replace("whk_00000000000000ff", "ID")
        assert other.get("/v1/webhooks").json() == []
        assert other.get("/v1/webhooks", params={"account": "acme"}).json() == []
        refused = other.post("/v1/webhooks", json={"url": rx.url, "account_id": "acme"})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "account_id"
        assert acme.post("/v1/admin/webhooks/dispatch").status_code == 404, "operators only"
        assert [w["id"] for w in operator.get("/v1/webhooks").json()] == [created["id"]]
        tested = acme.post(webhook + "/test")
        assert tested.status_code == 202 and tested.json()["status"] == "pending", "queued, not sent on the request"
        assert operator.post("/v1/admin/webhooks/dispatch").json()["delivered"] == 1
        log = acme.get(webhook + "/deliveries").json()
        assert [d["event_type"] for d in log] == ["webhook.test"] and log[0]["log"][0]["status_code"] == 200
        assert rx.secret not in acme.get(webhook).text + acme.get(webhook + "/deliveries").text
        # 10 test sends per 10 minutes per account (one used above); then 429 with Retry-After.
        assert [acme.post(webhook + "/test").status_code for _ in range(9)] == [202] * 9
        limited = acme.post(webhook + "/test")
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) > 0
        assert "webhook test sends" in limited.json()["error"]["message"]
        assert operator.post("/v1/admin/webhooks/dispatch").json()["delivered"] == 9
        bad = acme.post("/v1/webhooks", json={"url": "ftp://hooks.example.com/x"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "url"
        bad = acme.post("/v1/webhooks", json={"url": rx.url, "secret": "mine"})
        assert bad.status_code == 400, "unknown fields are refused: the secret is always ours"
        bad = acme.post("/v1/webhooks", json={"url": rx.url, "events": "export.paused"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "events"
        assert httpx.get(server.url + "/v1/webhooks", trust_env=False).status_code == 401
        for client in (acme, other, operator):
            client.close()
    assert [r.signature_ok for r in rx.requests] == [True] * 10


def test_the_dagster_sensor_sends_due_deliveries(tmp_path: Any) -> None:
    from seqexport_dagster.definitions import build_definitions
    from seqexport_dagster.defs.resources import (
        ControlPlaneResource,
        ExporterResource,
        FixedClock,
        OperatorResource,
        SourceResource,
    )
    from seqexport_dagster.defs.webhooks import webhook_sensor

    spec = new_key_spec("t1")
    world = World.in_files(tmp_path, DAY0, spec)
    try:
        export = world.local_export()
        api = Exports(world.store, world.policy, clock=world.clock)
        with receiver(fail_first=1) as rx:
            added = api.webhooks().add(account_id="acme", url=rx.url)
            rx.secret = added.secret
            api.pause(export.id)

            def tick(at_ms: int) -> str:
                exporter = ExporterResource(
                    control_plane=ControlPlaneResource(database_url=world.control_url, secret_keys=spec),
                    source=SourceResource(source_url=world.source_url),
                    operator=OperatorResource(allow_local="1"),
                    clock=FixedClock(at_ms=at_ms),
                )
                with dg.build_sensor_context(resources={"exporter": exporter}) as context:
                    result = webhook_sensor(context)
                assert isinstance(result, dg.SkipReason), "the sensor never launches a run"
                return str(result.skip_message)

            assert tick(DAY0) == "webhooks: 1 attempted, 1 retrying"
            assert tick(DAY0 + 1000) == "webhooks: nothing due", "the retry waits for its backoff"
            assert tick(DAY0 + DAY_MS) == "webhooks: 1 attempted, 1 delivered"
        assert [r.answered for r in rx.requests] == [503, 200] and all(r.signature_ok for r in rx.requests)
        defs = build_definitions(first_day=day_of(DAY0))
        assert "webhook_sensor" in {s.name for s in defs.sensors or []}
    finally:
        world.dispose()
