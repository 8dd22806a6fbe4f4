"""``/docs``: the interactive API page works in a real browser with nothing fetched from outside the
server (issue 25, item 6), and bad request bodies get a clear message naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from seqexport_dagster.api import Exports
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


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        # Truncated JSON: never `"field": "13"` (a character offset).
        ('{"bucket": "acme-exports", "datasets": ["a"', "body",
         "body: not valid JSON (Expecting ',' delimiter at character 43): send one complete JSON object"),
        # A wrong type: never `datasets.list[str]` (a member of the union).
        ('{"bucket": "acme-exports", "datasets": 5}', "datasets",
         "datasets: got a number; accepted: a list, a comma-separated string, or 'all'"),
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
