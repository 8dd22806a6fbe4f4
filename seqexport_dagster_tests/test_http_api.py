"""The HTTP API end to end: `seqexport serve` on 127.0.0.1, two accounts with exports on a moto bucket.

Covers every operation, the isolation matrix (every endpoint × the other account's export id →
404, exactly as a missing id; every endpoint without a token or with a revoked one → 401), the
error mapping, Idempotency-Key, the per-account write limit, and a planted secret that appears in no
response and not in the server's log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.store.token import TokenStore
from seqexport_dagster_tests.support.api_server import ApiServer, mint, serve_process, server_env
from seqexport_dagster_tests.support.moto_server import MotoServer

pytestmark = pytest.mark.slow

PLANTED = "PLANTED-SECRET-7c1e0b9a44d2f6e8"
ROTATED = "ROTATED-SECRET-e0f1a2b3c4d5e6f7"
UNKNOWN = "exp_0000000000000000"


class Recorder:
    """Every response body the test saw, to look for the planted secrets at the end."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def __call__(self, response: httpx.Response) -> None:
        response.read()
        self.bodies.append(f"{response.status_code} {dict(response.headers)} {response.text}")


@pytest.fixture(name="api")
def api_fixture(tmp_path: Path, moto: MotoServer) -> Iterator[tuple[ApiServer, Exports, Recorder]]:
    env = server_env(f"sqlite:///{tmp_path / 'control.db'}", new_key_spec("k1"), tmp_path / "home")
    exports = Exports.from_settings(Settings.from_env(env))
    with serve_process(env, tmp_path / "server.log", "--write-limit", "5/3600") as server:
        yield server, exports, Recorder()
    exports.close()


def client(server: ApiServer, recorder: Recorder, token: str | None) -> httpx.Client:
    c = server.client(token)
    c.event_hooks["response"] = [recorder]
    return c


def s3_body(bucket: str, endpoint: str, secret: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "s3",
        "bucket": bucket,
        "prefix": "sequenzy",
        "endpoint": endpoint,
        "access_key_id": "AKIAEXAMPLE000000001",
        "secret_access_key": secret,
        "datasets": ["email_events", "custom_events"],
        **extra,
    }


def test_http_api_end_to_end(api: tuple[ApiServer, Exports, Recorder], moto: MotoServer) -> None:
    server, exports, rec = api
    admin = moto.admin_client()
    for bucket in ("http-acme", "http-beta", "http-acme-v2"):
        admin.create_bucket(Bucket=bucket)
    acme_token, beta_token, operator_token = mint(exports, "acme"), mint(exports, "beta"), mint(exports, None)
    acme, beta, operator = (client(server, rec, t) for t in (acme_token, beta_token, operator_token))

    # Health and the OpenAPI document need no token.
    anonymous = client(server, rec, None)
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/readyz").status_code == 200
    spec = anonymous.get("/openapi.json").json()
    assert {"/v1/exports", "/v1/exports/{export_id}", "/v1/exports/{export_id}/history"} <= set(spec["paths"])

    # create: the connection test writes to moto; Idempotency-Key returns the first export again.
    # No lag: "export now" has something to write at once (with the default 2 minutes it says when, 409).
    body = s3_body("http-acme", moto.endpoint, PLANTED, lag_ms=0)
    first = acme.post("/v1/exports", json=body, headers={"Idempotency-Key": "create-1"})
    assert first.status_code == 201, first.text
    again = acme.post("/v1/exports", json=body, headers={"Idempotency-Key": "create-1"})
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(exports.list(account_id="acme")) == 1
    other = acme.post("/v1/exports", json={**body, "prefix": "x"}, headers={"Idempotency-Key": "create-1"})
    assert other.status_code == 409 and "different request" in other.json()["error"]["message"]
    a_id = first.json()["id"]
    assert first.json()["account_id"] == "acme" and first.json()["access_key_id"] == "AKIA************0001"
    keys = [o["Key"] for o in admin.list_objects_v2(Bucket="http-acme")["Contents"]]
    assert len(keys) == 1 and keys[0].startswith("sequenzy/_sequenzy/connection-test-")
    b = beta.post("/v1/exports", json=s3_body("http-beta", moto.endpoint, PLANTED))
    assert b.status_code == 201, b.text
    b_id = b.json()["id"]
    # An account token cannot create for another account; an operator token must name one.
    wrong = acme.post("/v1/exports", json={**body, "account_id": "beta"})
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "account_id"
    assert operator.post("/v1/exports", json=body).json()["error"]["field"] == "account_id"

    # A failed connection test: 422, nothing saved, the store's words, no secret.
    failed = acme.post("/v1/exports", json=s3_body("no-such-bucket-http", moto.endpoint, PLANTED))
    assert failed.status_code == 422, failed.text
    assert "does not exist" in failed.json()["error"]["message"] and len(exports.list(account_id="acme")) == 1

    # list: each account sees its own; the operator all of them, or one account.
    assert [e["id"] for e in acme.get("/v1/exports").json()] == [a_id]
    assert [e["id"] for e in beta.get("/v1/exports").json()] == [b_id]
    assert acme.get("/v1/exports", params={"account": "beta"}).json() == []
    assert {e["id"] for e in operator.get("/v1/exports").json()} == {a_id, b_id}
    assert [e["id"] for e in operator.get("/v1/exports", params={"account": "beta"}).json()] == [b_id]

    # status, pause, resume, export-now (idempotent), datasets, destination, history, ledger.
    status = acme.get(f"/v1/exports/{a_id}").json()
    assert status["id"] == a_id and status["last_error"] is None and {"now", "datasets"} <= status.keys()
    assert acme.post(f"/v1/exports/{a_id}/pause").json()["status"] == "paused"
    assert acme.post(f"/v1/exports/{a_id}/export-now").status_code == 409  # paused: resume first
    assert acme.post(f"/v1/exports/{a_id}/resume").json()["status"] == "active"
    early = beta.post(f"/v1/exports/{b_id}/export-now")  # within its 2-minute lag: says why and when
    assert early.status_code == 409 and "has nothing to export yet" in early.json()["error"]["message"]
    now1 = acme.post(f"/v1/exports/{a_id}/export-now", headers={"Idempotency-Key": "now-1"})
    now2 = acme.post(f"/v1/exports/{a_id}/export-now", headers={"Idempotency-Key": "now-1"})
    assert now1.status_code == now2.status_code == 200 and now1.json() == now2.json()
    assert now1.json()["export_now_requested_at"] is not None
    added = acme.patch(f"/v1/exports/{a_id}/datasets", json={"add": ["sms_events"]})
    assert "sms_events" in [d["dataset"] for d in added.json()["datasets"]]
    removed = acme.patch(f"/v1/exports/{a_id}/datasets", json={"remove": ["sms_events"]})
    assert "sms_events" not in [d["dataset"] for d in removed.json()["datasets"]]
    bad = acme.patch(f"/v1/exports/{a_id}/datasets", json={"add": ["clicks"]})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "dataset"
    moved = acme.patch(
        f"/v1/exports/{a_id}/destination",
        json={"bucket": "http-acme-v2", "access_key_id": "AKIAEXAMPLE000000002", "secret_access_key": ROTATED},
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["bucket"] == "http-acme-v2" and moved.json()["destination_version"] == 2
    config, _ = exports.store.destination_config(a_id)
    assert config.secret_access_key == ROTATED  # stored sealed, never returned
    assert acme.get(f"/v1/exports/{a_id}/history", params={"days": 14}).json() == []
    assert acme.get(f"/v1/exports/{a_id}/history", params={"days": 15}).json()["error"]["field"] == "days"
    assert acme.get(f"/v1/exports/{a_id}/ledger").json() == []
    # The table: Parquet first (a 400 naming `table` says so), then on, and the format kept under it.
    no_parquet = acme.patch(f"/v1/exports/{a_id}/table", json={"table": "delta"})
    assert no_parquet.status_code == 400 and no_parquet.json()["error"]["field"] == "table"
    assert acme.patch(f"/v1/exports/{a_id}/format", json={"format": "parquet"}).json()["format"] == "parquet"
    assert acme.patch(f"/v1/exports/{a_id}/table", json={"table": "delta"}).json()["table"] == "delta"
    kept = acme.patch(f"/v1/exports/{a_id}/format", json={"format": "jsonl.gz"})
    assert kept.status_code == 400 and "turn the table off first" in kept.json()["error"]["message"]
    assert acme.get(f"/v1/exports/{a_id}").json()["table"] == "delta"
    assert operator.post("/v1/admin/rotate-keys").json() == {"resealed": 0, "failed": []}

    # The isolation matrix: every endpoint with the other account's id answers as a missing id.
    endpoints: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/v1/exports/{id}", None),
        ("DELETE", "/v1/exports/{id}", None),
        ("POST", "/v1/exports/{id}/pause", None),
        ("POST", "/v1/exports/{id}/resume", None),
        ("POST", "/v1/exports/{id}/export-now", None),
        ("PATCH", "/v1/exports/{id}/datasets", {"add": ["sms_events"]}),
        ("PATCH", "/v1/exports/{id}/destination", {"prefix": "stolen"}),
        ("PATCH", "/v1/exports/{id}/format", {"format": "parquet"}),
        ("PATCH", "/v1/exports/{id}/table", {"table": None}),
        ("GET", "/v1/exports/{id}/history", None),
        ("GET", "/v1/exports/{id}/ledger", None),
    ]
    for method, template, payload in endpoints:
        for caller, foreign in ((acme, b_id), (beta, a_id)):
            missing = caller.request(method, template.format(id=UNKNOWN), json=payload)
            probed = caller.request(method, template.format(id=foreign), json=payload)
            assert missing.status_code == probed.status_code == 404, (method, template, probed.text)
            assert probed.json() == {"error": {"type": "not_found", "message": f"export {foreign!r} not found"}}
            assert missing.json()["error"]["message"] == f"export {UNKNOWN!r} not found"
            assert probed.headers.keys() == missing.headers.keys()
    assert acme.post("/v1/admin/rotate-keys").status_code == 404  # operator-only, invisible to accounts
    assert exports.get(a_id).status == "active" and exports.get(b_id).prefix == "sequenzy"
    assert exports.get(a_id).table == "delta" and exports.get(b_id).format == "jsonl.gz"

    # Without a token, with a wrong one or a revoked one: 401 and nothing else, on every endpoint.
    tokens = TokenStore(exports.store.engine)
    revoked_token, revoked = tokens.create(account_id="acme", now_ms=0)
    assert client(server, rec, revoked_token).get("/v1/exports").status_code == 200
    tokens.revoke(revoked.id, 0)
    everything = [
        *endpoints,
        ("GET", "/v1/exports", None),
        ("POST", "/v1/exports", body),
        ("POST", "/v1/admin/rotate-keys", None),
    ]
    for token in (None, "sqx_000000000000_" + "A" * 43, acme_token[:-1] + "B", revoked_token):
        unauthorized = client(server, rec, token)
        for method, template, payload in everything:
            got = unauthorized.request(method, template.format(id=a_id), json=payload)
            assert got.status_code == 401, (token, method, template, got.text)
            assert got.json()["error"]["type"] == "unauthorized" and got.headers["WWW-Authenticate"] == "Bearer"
    assert client(server, rec, acme_token).get("/v1/exports").status_code == 200
    assert server.client(None).get("/v1/exports", headers={"Authorization": acme_token}).status_code == 401

    # The write limit: each destination write counts per account (5 per hour here); others are unaffected.
    gamma = client(server, rec, mint(exports, "gamma"))
    codes = [
        gamma.post("/v1/exports", json=s3_body("no-such-bucket-http", moto.endpoint, PLANTED)).status_code
        for _ in range(6)
    ]
    assert codes == [422] * 5 + [429]
    limited = gamma.post("/v1/exports", json=s3_body("http-acme", moto.endpoint, PLANTED))
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) > 0
    assert beta.patch(f"/v1/exports/{b_id}/destination", json={"prefix": "sequenzy/v2"}).status_code == 200

    # delete: the export stays readable.
    deleted = acme.delete(f"/v1/exports/{a_id}")
    assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
    assert acme.post(f"/v1/exports/{a_id}/pause").status_code == 409
    assert acme.get(f"/v1/exports/{a_id}").json()["status"] == "deleted"

    # The planted secrets: in no response (bodies and headers), not in the server's log.
    log = server.log_with(f"GET /v1/exports/{a_id} 200")  # the last request's line: the whole log
    assert "GET /v1/exports/" in log and "account=acme" in log  # the access log is there...
    for secret in (PLANTED, ROTATED):
        assert not [b for b in rec.bodies if secret in b]
        assert secret not in log
    assert "?days" not in log and "days=" not in log  # ...without query values
    assert "Traceback" not in log
