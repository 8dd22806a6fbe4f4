"""Schemathesis against the running server: every operation of /openapi.json, property-generated
requests, checked for `not_a_server_error` and response-schema conformance.

The server runs without the operator's local switch (no local folders, no loopback endpoints), so
generated bodies cannot make it write anywhere on this machine, and with a write limit of 3 per
hour per account, so at most three generated creates or moves reach out to an endpoint at all.
Small example counts keep it within a CI budget (27 operations × 12 examples).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.api_server import ApiServer, mint, serve_process, server_env

pytestmark = pytest.mark.slow
TOKENS: dict[str, str] = {}


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    root = tmp_path_factory.mktemp("schemathesis")
    env = server_env(f"sqlite:///{root / 'control.db'}", new_key_spec("k1"), root / "home")
    del env["SEQEXPORT_ALLOW_LOCAL"]
    env = {k: v for k, v in env.items() if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY")}
    exports = Exports.from_settings(Settings.from_env(env))
    # Half the examples run as the operator (sees everything), half as an account.
    TOKENS["operator"], TOKENS["acme"] = mint(exports, None), mint(exports, "acme")
    with serve_process(env, root / "server.log", "--write-limit", "3/3600") as server:
        yield server
    exports.close()
    assert "Traceback" not in (root / "server.log").read_text()


@pytest.fixture(scope="module")
def api_schema(fuzzed_server: ApiServer) -> Any:
    return schemathesis.openapi.from_url(f"{fuzzed_server.url}/openapi.json")


def test_every_operation_conforms(api_schema: Any, fuzzed_server: ApiServer) -> None:
    """One Hypothesis run per operation (schemathesis's pytest plugin does not load under pytest 9)."""
    session = requests.Session()
    session.trust_env = False  # never a proxy between the test and loopback
    examples = int(os.environ.get("SEQEXPORT_SCHEMATHESIS_EXAMPLES", "12"))
    tried: list[str] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        def conforms(case: Any) -> None:
            token = TOKENS["operator" if len(repr(case.body)) % 2 else "acme"]
            case.call_and_validate(
                base_url=fuzzed_server.url,
                session=session,
                headers={"Authorization": f"Bearer {token}"},
                checks=[not_a_server_error, response_schema_conformance],
            )

        conforms()
        tried.append(f"{operation.method.upper()} {operation.path}")
    session.close()
    assert (
        len(tried) == 27
        and "POST /v1/role-setups" in tried
        and "POST /v1/webhooks/{webhook_id}/enable" in tried
        and "POST /v1/webhooks/{webhook_id}/rotate-secret" in tried
        and "POST /v1/webhooks" in tried
        and "GET /v1/webhooks/{webhook_id}/deliveries" in tried
        and "PATCH /v1/exports/{export_id}/format" in tried
        and "PATCH /v1/exports/{export_id}/table" in tried
        and "PATCH /v1/exports/{export_id}/destination" in tried
    ), tried
    assert "PATCH /v1/exports/{export_id}/frequency" in tried, tried
