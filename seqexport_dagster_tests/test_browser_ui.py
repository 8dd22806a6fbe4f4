"""Issue 17, "Must show": the Dagster UI in a real browser (headless Debian chromium, Playwright).

`dagster dev` (webserver and daemon) runs on 127.0.0.1 with a fresh DAGSTER_HOME. One export writes
to a bucket that does not exist on a local moto server: the scheduler sensor's first tick launches
its run, which fails for that customer-readable reason; the next tick requests nothing, because the
export waits out its backoff. The browser then opens the failed run's page and the sensor's page and
asserts on the page text, without clicking anything open, that the customer message and "retries at
<time> (attempt n)" are visible. Screenshots go to ``test-artefacts/`` at the repository root.

The browser is required: without /usr/bin/chromium (`apt-get install -y chromium`) this test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.runner import wall_clock_ms
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.window import MINUTE_MS, floor_to_grid
from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import ROOT, daemon_env, group_process
from seqexport_dagster_tests.support.world import World

CHROMIUM = Path("/usr/bin/chromium")
ARTEFACTS = ROOT / "test-artefacts"


def wait_for(what: str, check: Callable[[], Any], server: subprocess.Popen[bytes], log: Path, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what} within {seconds:.0f} s:\n" + log.read_text()[-3000:])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # 127.0.0.1 only
            return bool(response.status == 200)
    except OSError:
        return False


def skip_community_dialog(page: Any) -> None:
    """Dagster's first visit shows a newsletter dialog over the page; it is not ours to assert on."""
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()
        page.wait_for_timeout(300)


@pytest.mark.slow
def test_failed_run_page_and_sensor_tick_show_message_and_next_retry(
    tmp_path: Path, moto: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's browser with `apt-get install -y chromium` (.ci/run does)"
        )
    from playwright.sync_api import sync_playwright

    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    key_spec = new_key_spec("ui")
    now = wall_clock_ms()
    # Created 20 minutes before the last quarter-hour: a 15-minute window is due at once.
    created = floor_to_grid(now, 15 * MINUTE_MS) - 20 * MINUTE_MS
    world = World.in_files(tmp_path, created, key_spec)
    missing = f"ui-missing-{uuid.uuid4().hex[:12]}"
    secret = f"ui-secret-{uuid.uuid4().hex}"
    export = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            missing,
            prefix="sequenzy",
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIAUIBROWSERTEST",
            secret_access_key=secret,
        ),
        datasets=("email_events",),
        frequency="15m",
        lag_ms=MINUTE_MS,
        now_ms=created,
    )
    # The instance's storage exists before `dagster dev` starts its daemon and webserver (no race
    # between two processes creating the SQLite schema).
    instance = dg.DagsterInstance.from_config(str(home))
    instance.get_runs(limit=1)
    port = free_port()
    log = tmp_path / "dagster_dev.log"
    env = daemon_env(home, world.control_url, world.source_url, key_spec)
    dagster = str(Path(sys.executable).parent / "dagster")
    command = [dagster, "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)]
    base = f"http://127.0.0.1:{port}"
    ARTEFACTS.mkdir(exist_ok=True)
    try:
        with group_process(command, env=env, log=log) as server:
            wait_for("the webserver answering", lambda: answers(f"{base}/server_info"), server, log, 120)

            def failed_run() -> Any:
                runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
                return runs[0] if runs else None

            run = wait_for("the export's run failing", failed_run, server, log, 180)
            state = world.store.get_export(export.id).dataset_state("email_events")
            assert state is not None and state.failures == 1 and state.last_error
            assert "does not exist" in state.last_error
            retry = run.tags["seqexport/retry"]
            assert retry.startswith("retries at ") and retry.endswith("(attempt 2)")

            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
                try:
                    page = browser.new_page(viewport={"width": 1600, "height": 1200})
                    page.goto(f"{base}/runs/{run.run_id}", wait_until="networkidle")
                    skip_community_dialog(page)
                    page.get_by_text("does not exist").first.wait_for(timeout=60_000)
                    page.screenshot(path=str(ARTEFACTS / "failed_run.png"), full_page=True)
                    text = page.inner_text("body")
                    assert "does not exist" in text and retry in text, text[-3000:]
                    # The failure leads with the customer message, not Dagster's class path.
                    assert "ExportFailed: bucket " in text and "events.Failure" not in text
                    assert "Not retrying" not in text
                    assert secret not in text and secret not in page.content()

                    # A later tick skips: the export waits out its backoff, and the tick says so.
                    sensor = f"{base}/locations/seqexport/sensors/scheduler_sensor"

                    def skip_shown() -> bool:
                        page.goto(sensor, wait_until="networkidle")
                        page.wait_for_timeout(1500)
                        skip_community_dialog(page)
                        body = page.inner_text("body")
                        return "in backoff" in body and retry in body

                    wait_for("a skipped tick saying why", skip_shown, server, log, 180)
                    page.screenshot(path=str(ARTEFACTS / "sensor_tick.png"), full_page=True)
                finally:
                    browser.close()
    finally:
        instance.dispose()
        world.dispose()
