"""The parts under the HTTP API: tokens, Idempotency-Key results, the write limit, the shared JSON
shapes, the 503 answer, and `seqexport tokens` (the end-to-end run is in test_http_api.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import InvalidInput, TooManyRequests
from seqexport_dagster.management import presentation as shapes
from seqexport_dagster.management.api import Exports
from seqexport_dagster.service.guard import RateLimit
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.idempotency import KEEP_MS, Claimed, IdempotencyStore, InProgress, Mismatch, Replay
from seqexport_dagster.store.tables import api_tokens
from seqexport_dagster.store.token import TokenStore
from seqexport_dagster_tests.support.api_server import mint, serve_thread
from seqexport_dagster_tests.support.cli_harness import Cli, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.world import DAY0, World


@pytest.fixture(name="any_world", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_world_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    from seqexport_dagster_tests.support.world import postgres_world, sqlite_world

    with (sqlite_world if request.param == "sqlite" else postgres_world)(tmp_path) as w:
        yield w


def test_tokens_are_stored_hashed_and_revocable(any_world: World) -> None:
    tokens = TokenStore(any_world.control_engine)
    value, token = tokens.create(account_id="acme", now_ms=DAY0, name="dashboard")
    operator_value, operator = tokens.create(account_id=None, now_ms=DAY0)
    assert value.startswith(token.id + "_") and token.scope == "account" and operator.is_operator
    with any_world.control_engine.connect() as conn:
        stored = " ".join(str(v) for row in conn.execute(sa.select(api_tokens)).all() for v in row)
    # The secret part is everything after "<id>_": it may itself contain "_" (token_urlsafe), so
    # splitting on the last "_" could leave a one-letter "secret" that any stored value contains.
    secret = value.removeprefix(token.id + "_")
    assert len(secret) == 43 and value not in stored and secret not in stored and token.id in stored
    assert tokens.authenticate(value, now_ms=DAY0) == token
    assert tokens.authenticate(operator_value, now_ms=DAY0) == operator
    for wrong in ("", "Bearer", value[:-1] + ("A" if value[-1] != "A" else "B"), token.id, value + "x"):
        assert tokens.authenticate(wrong, now_ms=DAY0) is None
    assert [t.id for t in tokens.list(account_id="acme")] == [token.id]
    assert tokens.revoke(token.id, DAY0 + 1).revoked_at == DAY0 + 1
    assert tokens.authenticate(value, now_ms=DAY0 + 2) is None and tokens.list(account_id="acme") == []
    assert [t.id for t in tokens.list(account_id="acme", include_revoked=True)] == [token.id]
    with pytest.raises(InvalidInput, match="token_id"):
        tokens.revoke("nope", DAY0)


def test_idempotency_claim_replay_mismatch_expiry(any_world: World) -> None:
    keys = IdempotencyStore(any_world.control_engine)
    assert keys.claim("acme", "k", "POST /v1/exports", "f1", DAY0) == Claimed()
    assert keys.claim("acme", "k", "POST /v1/exports", "f1", DAY0 + 1) == InProgress()
    keys.finish("acme", "k", 201, '{"id": "exp_1"}')
    assert keys.claim("acme", "k", "POST /v1/exports", "f1", DAY0 + 2) == Replay(201, '{"id": "exp_1"}')
    assert keys.claim("acme", "k", "POST /v1/exports", "f2", DAY0 + 2) == Mismatch()
    assert keys.claim("beta", "k", "POST /v1/exports", "f2", DAY0 + 2) == Claimed()  # scoped to the caller
    keys.release("beta", "k")
    assert keys.claim("beta", "k", "POST /v1/exports", "f3", DAY0 + 3) == Claimed()  # a failure frees the key
    # After 24 h the key is new again, and the claim took every expired key with it (beta's too).
    assert keys.claim("acme", "k", "POST /v1/exports", "f2", DAY0 + KEEP_MS + 4) == Claimed()
    assert keys.claim("beta", "k", "POST /v1/exports", "f9", DAY0 + KEEP_MS + 4) == Claimed()
    # Maintenance: everything created before the cutoff goes.
    assert keys.prune(older_than=DAY0 + KEEP_MS + 4) == 0
    assert keys.prune(older_than=DAY0 + KEEP_MS + 5) == 2


def test_idempotency_one_winner_among_concurrent_claims(any_world: World) -> None:
    keys = IdempotencyStore(any_world.control_engine)
    outcomes: list[object] = []
    barrier = threading.Barrier(6)

    def claim() -> None:
        barrier.wait()
        outcomes.append(keys.claim("acme", "race", "POST /v1/exports", "f", DAY0))

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(Claimed()) == 1 and outcomes.count(InProgress()) == 5


def test_write_limit_slides_per_account() -> None:
    now = [0.0]
    limit = RateLimit(2, 60.0, now=lambda: now[0])
    limit.check("acme")
    limit.check("acme")
    limit.check("beta")
    with pytest.raises(TooManyRequests) as refused:
        limit.check("acme")
    assert refused.value.retry_after_s == 60
    now[0] = 60.5
    limit.check("acme")
    parsed = RateLimit.parse("10/60")
    assert (parsed.calls, parsed.per_s) == (10, 60.0)
    for bad in ("10", "x/60", "0/60", "5/0"):
        with pytest.raises(InvalidInput, match="write-limit"):
            RateLimit.parse(bad)


def test_shapes_round_trip(world: World) -> None:
    record = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            "acme-exports",
            prefix="p",
            region="us-east-1",
            access_key_id="AKIAEXAMPLE000000001",
            secret_access_key="s3cret",
        ),
        datasets=("email_events", "subscribers"),
        frequency="1h",
        lag_ms=120_000,
        now_ms=DAY0,
        file_format="parquet",
        table="delta",
    )
    body = shapes.export_json(record)
    back = shapes.export_from_json(body)
    assert shapes.export_json(back) == body and back.access_key_id == "AKIA************0001"
    assert (back.format, back.table) == ("parquet", "delta")
    assert back.datasets == record.datasets and back.created_at == record.created_at
    status = Exports(world.store, OperatorPolicy(), clock=world.clock).status(record.id)
    assert shapes.status_json(shapes.status_from_json(shapes.status_json(status))) == shapes.status_json(status)
    assert "s3cret" not in str(body)


def test_control_plane_away_is_503_with_retry_after(tmp_path: Path) -> None:
    engine = sa.create_engine("postgresql+psycopg2://postgres@127.0.0.1:1/gone")
    exports = Exports(ControlPlane(engine, SecretBox.parse(new_key_spec("k"))), OperatorPolicy())
    with serve_thread(exports) as server, server.client("sqx_000000000000_" + "A" * 43) as client:
        for path in ("/v1/exports", "/v1/exports/exp_0000000000000000"):
            got = client.get(path)
            assert got.status_code == 503 and got.headers["Retry-After"] == "5", got.text
            assert got.json()["error"]["type"] == "unavailable"
            assert "127.0.0.1" not in got.text and "SELECT" not in got.text and "psycopg2" not in got.text
        assert httpx.get(f"{server.url}/healthz", trust_env=False).status_code == 503
        assert httpx.get(f"{server.url}/readyz", trust_env=False).headers["Retry-After"] == "5"


def test_tokens_command(run_sqlite: Cli) -> None:
    run = run_sqlite
    created = run("tokens", "create", "--account", "acme", "--name", "dashboard")
    assert created.code == 0 and "shown only now" in created.out
    value = created.out.strip().splitlines()[-1]
    assert (
        value.startswith("sqx_")
        and TokenStore(run.world.control_engine).authenticate(value, now_ms=wall_clock_ms()) is not None
    )
    listed = run.ok("tokens", "list")
    assert [(t["account_id"], t["scope"], t["name"]) for t in listed] == [("acme", "account", "dashboard")]
    secret = value.removeprefix(listed[0]["id"] + "_")  # the whole secret: it may contain "_"
    assert len(secret) == 43 and value not in run("tokens", "list").out and secret not in str(listed)
    operator = run.ok("tokens", "create", "--operator")
    assert operator["scope"] == "operator" and operator["token"].startswith(operator["id"] + "_")
    assert run.ok("tokens", "revoke", listed[0]["id"])["revoked_at"] is not None
    assert TokenStore(run.world.control_engine).authenticate(value, now_ms=wall_clock_ms()) is None
    both = run("tokens", "create", "--account", "acme", "--operator")
    assert both.code == 2 and "--operator" in both.err
    assert run("tokens", "revoke", "sqx_000000000000").code == 3
    expiring = run.ok("tokens", "create", "--account", "acme", "--expires-in-days", "30")
    assert expiring["expires_at"] is not None and expiring["last_used_at"] is None
    assert run("tokens", "list", "--expires-in-days", "3").code == 2
    reserved = run("tokens", "create", "--account", "operator")
    assert reserved.code == 2 and "reserved" in reserved.err
    remote = run("tokens", "list", env={**run.env, "SEQEXPORT_API_URL": "http://127.0.0.1:1"})
    assert remote.code == 2 and "SEQEXPORT_API_URL" in remote.err


def test_destination_changes_count_against_the_write_limit(world: World) -> None:
    """A move writes a test file to an address the caller chose: it counts, per account, like a create."""
    exports = Exports(world.store, OperatorPolicy(allow_local=True), clock=world.clock)
    acme_id = world.local_export("acme", folder="a").id
    beta_id = world.local_export("beta", folder="b").id
    with serve_thread(exports, RateLimit(2, 3600.0)) as server:
        acme = server.client(mint(exports, "acme"))
        beta = server.client(mint(exports, "beta"))
        moves = [
            acme.patch(f"/v1/exports/{acme_id}/destination", json={"bucket": str(world.root / f"a{i}")})
            for i in range(3)
        ]
        assert [m.status_code for m in moves] == [200, 200, 429], moves[-1].text
        assert int(moves[-1].headers["Retry-After"]) > 3500 and moves[-1].json()["error"]["type"] == "rate_limited"
        assert exports.get(acme_id).bucket == str(world.root / "a1")  # the refused move changed nothing
        assert beta.patch(f"/v1/exports/{beta_id}/destination", json={"prefix": "v2"}).status_code == 200
        acme.close()
        beta.close()


def test_the_table_setting_over_http(world: World) -> None:
    """``table`` in POST /v1/exports and PATCH .../table, checked by the same rules as the local API
    (400 naming ``table`` and what it accepts), scoped like every route, and in every export answer."""
    exports = Exports(world.store, OperatorPolicy(allow_local=True), clock=world.clock)
    jsonl = world.local_export("acme", folder="j")

    def body(folder: str, **extra: Any) -> dict[str, Any]:
        return {"provider": "local", "bucket": str(world.root / folder), "datasets": ["custom_events"], **extra}

    with serve_thread(exports) as server, server.client(mint(exports, "acme")) as acme:
        created = acme.post("/v1/exports", json=body("t", format="parquet", table="delta"))
        assert created.status_code == 201 and created.json()["table"] == "delta", created.text
        t_id = created.json()["id"]
        assert exports.get(t_id).table == "delta"
        assert acme.get(f"/v1/exports/{t_id}").json()["table"] == "delta"
        assert {e["id"]: e["table"] for e in acme.get("/v1/exports").json()} == {jsonl.id: None, t_id: "delta"}
        plain = acme.post("/v1/exports", json=body("p", format="parquet", table=None))
        assert plain.status_code == 201 and plain.json()["table"] is None, plain.text

        def refused(answer: httpx.Response, *says: str) -> None:
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["type"] == "invalid_input" and error["field"] == "table", error
            assert all(s in error["message"] for s in says), error["message"]

        before = len(exports.list(account_id="acme"))
        refused(acme.post("/v1/exports", json=body("x", table="delta")), "needs the parquet format, not jsonl.gz")
        refused(acme.post("/v1/exports", json=body("x", format="parquet", table="iceberg")), "delta", "none")
        refused(acme.post("/v1/exports", json=body("x", table=5)), "got a number", "delta")
        refused(acme.post("/v1/exports", json=body("x", table="d" * 17)), "at most 16 characters")
        assert len(exports.list(account_id="acme")) == before  # nothing saved

        # Off (null or "none", as the CLI says it), on again, and the refusals.
        assert acme.patch(f"/v1/exports/{t_id}/table", json={"table": None}).json()["table"] is None
        assert exports.get(t_id).table is None
        assert acme.patch(f"/v1/exports/{t_id}/table", json={"table": "delta"}).json()["table"] == "delta"
        assert acme.patch(f"/v1/exports/{t_id}/table", json={"table": "none"}).json()["table"] is None
        assert acme.patch(f"/v1/exports/{t_id}/table", json={"table": "delta"}).json()["table"] == "delta"
        refused(acme.patch(f"/v1/exports/{t_id}/table", json={"table": "iceberg"}), "'iceberg' is not a table format")
        refused(acme.patch(f"/v1/exports/{t_id}/table", json={}), "table: required", "delta")
        refused(acme.patch(f"/v1/exports/{jsonl.id}/table", json={"table": "delta"}), "change the format to parquet")
        # The format cannot leave Parquet under a table: the local API's own message, over HTTP.
        to_jsonl = acme.patch(f"/v1/exports/{t_id}/format", json={"format": "jsonl.gz"})
        refused(to_jsonl, "keeps a delta table", "turn the table off first")
        with pytest.raises(InvalidInput) as local:
            exports.change_format(t_id, "jsonl.gz")
        assert to_jsonl.json()["error"]["message"] == local.value.message
        assert exports.get(t_id).format == "parquet" and exports.get(t_id).table == "delta"

        # Another account's export answers as a missing one; no token, 401.
        with server.client(mint(exports, "beta")) as beta:
            foreign = beta.patch(f"/v1/exports/{t_id}/table", json={"table": None})
            assert foreign.status_code == 404 and foreign.json()["error"]["type"] == "not_found"
        with server.client(None) as anonymous:
            assert anonymous.patch(f"/v1/exports/{t_id}/table", json={"table": None}).status_code == 401
        assert exports.get(t_id).table == "delta"


def test_healthz_checks_the_control_plane_at_most_once_a_refresh_and_notices_it_going() -> None:
    """`/healthz` needs no token: its check runs at most once per refresh (here 0.2 s) whatever the
    number of probes, a control plane that goes away turns it to False, and a hung check too."""
    import asyncio

    from seqexport_dagster.service.health import ControlPlaneHealth

    calls: list[float] = []
    answers = {"ok": True}
    hang = threading.Event()

    def check() -> bool:
        calls.append(time.monotonic())
        if not answers["ok"] and hang.is_set():
            time.sleep(5)
        return answers["ok"]

    async def scenario() -> None:
        health = ControlPlaneHealth(check, refresh_s=0.2, stale_s=1.0)
        # When each check was started (the event loop's side): the thread's own clock reading in
        # `check` can come late under load, so two starts 0.2 s apart may read 0.195 s there.
        started: list[float] = []
        start = health._start

        def counted_start() -> Any:
            new = health.running is None
            running = start()
            if new:
                started.append(health.checked_at)
            return running

        health._start = counted_start  # type: ignore[method-assign]
        assert await health.healthy() and len(calls) == 1  # the first probe waits for a check
        assert all([await health.healthy() for _ in range(200)]) and len(calls) == 1  # the rest do not
        answers["ok"] = False
        deadline = time.monotonic() + 30
        while await health.healthy() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await health.healthy(), "the control plane went away and /healthz still says ok"
        # One check per refresh at most, however often it was asked meanwhile.
        assert len(started) >= 2 and all(b - a >= 0.2 for a, b in zip(started, started[1:], strict=False)), started
        answers["ok"] = True
        deadline = time.monotonic() + 30
        while not await health.healthy() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert await health.healthy()
        # A check that hangs: once the last answer is older than stale_s, the answer is no.
        answers["ok"] = False
        hang.set()
        deadline = time.monotonic() + 30
        while await health.healthy() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await health.healthy()

    asyncio.run(scenario())
