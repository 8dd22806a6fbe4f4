"""``/docs``: the interactive API page works in a real browser with nothing fetched from outside the
server (issue 25, item 6), and bad request bodies get a clear message naming the field."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqexport_dagster.management.api import Exports
from seqexport_dagster_tests.support.api_server import ApiServer, mint, serve_thread
from seqexport_dagster_tests.support.processes import ROOT
from seqexport_dagster_tests.support.world import World

CHROMIUM = Path("/usr/bin/chromium")
ARTEFACTS = ROOT / "test-artefacts"


@pytest.fixture(name="server")
def server_fixture(world: World) -> Iterator[tuple[ApiServer, str]]:
    exports = Exports(world.store, world.policy, clock=world.clock)
    with serve_thread(exports) as server:
        yield server, mint(exports, "acme")


def test_docs_page_and_its_assets_come_from_the_server(server: tuple[ApiServer, str]) -> None:
    api, _ = server
    with api.client() as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "cdn" not in page.text.lower() and "https://" not in page.text
        for asset in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
            assert asset in page.text
            answer = client.get(asset)
            assert answer.status_code == 200 and len(answer.content) > 100_000, asset
        assert "/docs" not in client.get("/openapi.json").json()["paths"]  # a page, not an operation


def test_docs_page_renders_every_operation_in_chromium(server: tuple[ApiServer, str]) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    api, _ = server
    with api.client() as client:
        operations = sum(len(ops) for ops in client.get("/openapi.json").json()["paths"].values())
    requested: list[str] = []
    ARTEFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("request", lambda request: requested.append(request.url))
            page.goto(f"{api.url}/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(ARTEFACTS / "api-docs-page.png"), full_page=True)
            assert page.locator(".opblock").count() == operations
            assert page.get_by_text("Sequenzy Data Exports").count() >= 1
            assert page.locator(".errors-wrapper").count() == 0, "Swagger UI could not read /openapi.json"
        finally:
            browser.close()
    outside = [u for u in requested if not u.startswith(api.url)]
    assert not outside, f"fetched from outside the server: {outside}"


def test_the_document_names_the_bearer_scheme_and_the_closed_sets(server: tuple[ApiServer, str]) -> None:
    """Swagger UI shows Authorize only for a security scheme, and sends the token only to the
    operations that name it: every /v1 operation does, the health checks do not. Closed sets are
    enums, in the bodies and in the answers (issue 42, item 3)."""
    api, _ = server
    with api.client() as client:
        schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            wanted = [{"bearerAuth": []}] if path.startswith("/v1/") else None
            assert op.get("security") == wanted, (method, path)
    bodies = schema["components"]["schemas"]

    def enum(component: str, prop: str) -> list[str]:
        field = bodies[component]["properties"][prop]
        for member in (field, *field.get("anyOf", ())):
            item = member.get("items", member)
            if "enum" in item:
                return list(item["enum"])
        raise AssertionError(f"{component}.{prop} is a free string: {field}")

    assert enum("CreateExport", "frequency") == enum("ChangeFrequency", "frequency") == ["15m", "1h", "6h", "24h"]
    assert enum("CreateExport", "format") == enum("ExportJson", "format") == ["jsonl.gz", "parquet"]
    assert enum("CreateExport", "table") == enum("ChangeTable", "table") == ["delta", "none"]
    assert enum("ExportJson", "table") == enum("ExportStatusJson", "table") == ["delta"]
    assert {"type": "null"} in bodies["ChangeTable"]["properties"]["table"]["anyOf"]  # null: no table
    assert enum("CreateExport", "provider") == enum("ChangeDestination", "provider") == ["s3", "gcs", "azure", "local"]
    assert enum("CreateExport", "sse") == ["AES256", "aws:kms"] and "" in enum("ChangeDestination", "sse")
    datasets = ["email_events", "sms_events", "custom_events", "subscribers"]
    assert enum("CreateExport", "datasets") == enum("ChangeDatasets", "add") == enum("LedgerWindowJson", "dataset")
    assert enum("CreateExport", "datasets") == datasets
    assert {"const": "all", "type": "string"} in bodies["CreateExport"]["properties"]["datasets"]["anyOf"]
    assert enum("ExportStatusJson", "status") == ["active", "paused", "deleted"]
    assert "export.failing" in enum("CreateWebhook", "events") and "*" in enum("CreateWebhook", "events")


def test_a_wrong_value_of_a_closed_set_keeps_the_message_naming_what_is_accepted(
    server: tuple[ApiServer, str], world: World
) -> None:
    """The enums document; the API still checks, and says what it accepts."""
    api, token = server
    export = world.local_export()
    with api.client(token) as client:
        answer = client.patch(f"/v1/exports/{export.id}/frequency", json={"frequency": "2h"})
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "frequency"
    assert "15m, 1h, 6h, 24h" in answer.json()["error"]["message"]


def test_authorize_and_try_it_out_in_chromium(server: tuple[ApiServer, str], world: World, tmp_path: Path) -> None:
    """As a person would: open /docs, Authorize with an account token, "Try it out" on
    ``GET /v1/exports``, Execute, and see 200 with the account's export; the screenshots stay in
    the test's tmp folder (and in test-artefacts/)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    api, token = server
    export = world.local_export("acme")
    ARTEFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{api.url}/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            page.locator("button.btn.authorize").first.click()
            dialog = page.locator(".modal-ux")
            dialog.locator("input").first.fill(token)
            dialog.locator("button.modal-btn.authorize").click()
            dialog.locator("button.btn-done").click()
            operation = page.locator(".opblock-get", has=page.locator(".opblock-summary-path[data-path='/v1/exports']"))
            operation.locator(".opblock-summary").click()
            operation.locator("button.try-out__btn").click()
            operation.locator("button.execute").click()
            status = operation.locator(".live-responses-table .response .response-col_status").first
            status.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "api-docs-try-it-out.png"), full_page=True)
            page.screenshot(path=str(ARTEFACTS / "api-docs-try-it-out.png"), full_page=True)
            assert status.inner_text().strip() == "200"
            answer = operation.locator(".live-responses-table .response-col_description pre").first.inner_text()
            assert export.id in answer
            assert token in operation.locator(".curl-command").inner_text()  # the header Swagger sent
        finally:
            browser.close()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        # Truncated JSON: never `"field": "13"` (a character offset).
        ('{"bucket": "acme-exports", "datasets": ["a"', "body",
         "the body is not JSON: Expecting ',' delimiter at line 1 column 44"),
        # A wrong type: never `datasets.list[str]` (a member of the union).
        ('{"bucket": "acme-exports", "datasets": 5}', "datasets",
         "datasets: got a number; accepted: a list of datasets, or 'all'"),
        ('{"bucket": 5}', "bucket", "bucket: got a number; accepted: a string"),
        ('{"bucket": "b", "lag_ms": "soon"}', "lag_ms",
         "lag_ms: got a string; accepted: an integer (trail real time by this much, 0 to 3,600,000 ms)"),
        ('["acme-exports"]', "body", "body: must be a JSON object, got a list"),
        ("{}", "bucket", "bucket: required"),
        ('{"bucket": "b", "colour": "red"}', "colour", "colour: not a field of this request"),
        ('{"bucket": "b", "secret_access_key": 123456789}', "secret_access_key",
         "secret_access_key: got a number; accepted: a string"),
    ],
)  # fmt: skip
def test_bad_bodies_name_the_field_and_what_is_accepted(
    server: tuple[ApiServer, str], body: str, field: str, message: str
) -> None:
    api, token = server
    with api.client(token) as client:
        answer = client.post("/v1/exports", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_input" and error["field"] == field
    assert error["message"].startswith(message), error["message"]
    assert "123456789" not in answer.text  # what was sent is described by its type, never echoed


def test_a_wrong_item_in_a_list_is_named_by_its_position(server: tuple[ApiServer, str], world: World) -> None:
    api, token = server
    export = world.local_export()
    with api.client(token) as client:
        answer = client.patch(f"/v1/exports/{export.id}/datasets", json={"add": ["sms_events", 7]})
        assert answer.status_code == 400
        assert answer.json()["error"] == {
            "type": "invalid_input",
            "field": "add[1]",
            "message": "add[1]: got a number; accepted: a string",
        }
        wrong = client.patch(f"/v1/exports/{export.id}/datasets", json={"add": "sms_events"})
        assert wrong.json()["error"]["message"] == (
            "add: got a string; accepted: a list (datasets to add; each starts from now)"
        )


def customer_api_block() -> str:
    doc = (ROOT / "docs" / "customers.md").read_text()
    section = doc.split("## Manage exports through the HTTP API")[1]
    return section.split("```bash\n")[1].split("```")[0]


def test_the_customer_docs_curl_examples_run_on_a_bare_machine(world: World) -> None:
    """Every curl line of docs/customers.md's API section, as written, against a real server, in a
    shell with nothing but /usr/bin and /bin (no uuidgen, no Python). The create line is left out (it
    tests a real AWS bucket; the API tests create through the same route), and so is the role setup,
    which needs the operator's AWS identity (test_role.py runs it against moto's STS)."""
    block = customer_api_block()
    assert "uuidgen" not in block and "$(key)" in block
    commands = [c for c in block.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")]
    prelude = [c for c in commands if not c.startswith(("curl", "{", " ", "JSON"))]
    calls = [c for c in commands if c.startswith("curl") and "-d @-" not in c and "/role-setups" not in c]
    assert len(prelude) == 2 and len(calls) == 13, (prelude, calls)

    exports = Exports(world.store, world.policy, clock=world.clock)
    export = world.local_export(datasets=("email_events", "subscribers"), folder="acme-exports")
    world.clock.advance(2 * 60 * 60 * 1000)
    with serve_thread(exports) as server:
        token = mint(exports, "acme")
        shell = {"PATH": "/usr/bin:/bin", "SEQEXPORT_API_TOKEN": token}
        setup = "\n".join(prelude).replace("https://exports.sequenzy.example/v1", f"{server.url}/v1")
        keys = set()
        for call in calls:
            call = re.sub(r"\s+# .*$", "", call).replace("exp_0123456789abcdef", export.id)
            script = f"set -euo pipefail\n{setup}\n{call} -w '\\n%{{http_code}}' --noproxy '*'"
            done = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (call, done.stderr)
            body, status = done.stdout.rsplit("\n", 1)
            assert status.startswith("2"), (call, status, body)
            assert '"error"' not in body, (call, body)
            if "export-now" in call:
                keys.add(json.loads(body)["id"])
        key_of = subprocess.run(
            ["bash", "-c", f"{setup}\necho $(key) $(key)"], env=shell, capture_output=True, text=True, check=True
        ).stdout.split()
        assert len(key_of) == 2 and key_of[0] != key_of[1] and all(len(k) == 32 for k in key_of)
    assert keys == {export.id}
    assert world.store.get_export(export.id).status == "deleted"
