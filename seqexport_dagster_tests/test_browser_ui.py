"""Issues 17 and 25, "Must show": the Dagster UI in a real browser (headless Debian chromium, Playwright).

`dagster dev` (webserver and daemon) runs on 127.0.0.1 with a fresh DAGSTER_HOME and a local moto
server. One export (account ``acme-failing``) writes to a bucket that does not exist: the scheduler
sensor's first tick launches its run, which fails for that customer-readable reason; the next tick
launches the export's status run, which fails its ``export_status`` partition (red). Then two
healthy exports (accounts ``globex-healthy`` and ``initech-healthy``, an existing bucket) are added
and deliver the same day. The browser asserts, on the page text and without clicking anything open:
- the failed run's page shows `ExportFailed: <message>`, the account and "retries at <time>
  (attempt n)", and no stack trace anywhere: not on the step's row, not on the run-level
  RUN_FAILURE row (`defs.run_failure`), and no frame of ours;
- the Catalog marks ``export_status`` red (one failed partition) and a healthy dataset not;
- ``export_status``'s partitions are named ``<account>/<export id>``: one failed, the two healthy
  ones materialized (green), none missing; the failing partition's page shows its account, health,
  each dataset's behind, last error and next retry; a healthy one's page its account and behind;
  its check names the failing export with its account (the healthy ones not); the status run's
  page says why, without a stack trace;
- the day the failing export's run left red on ``email_events`` is no longer red once the healthy
  exports' run delivered it, and its page says why (``why_not_red``) and that it is not complete;
- the sensor's tick list says why a tick requested nothing, in a short line naming the account in
  backoff, in the tick's own row (the cursor column, and the tooltip of "0 runs requested").
Screenshots and page texts go to the test's artefacts, ``<tmp_path>/artefacts/`` (pytest keeps the
last runs' tmp_path), and are copied to ``test-artefacts/browser_ui/`` at the repository root.

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

from seqexport_dagster.contract.window import MINUTE_MS, floor_to_grid
from seqexport_dagster.delivery.runner import wall_clock_ms
from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.store import ACTIVE, PAUSED
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import ROOT, daemon_env, group_process
from seqexport_dagster_tests.support.world import World

CHROMIUM = Path("/usr/bin/chromium")
#: Where the screenshots are copied after the run (the test's own are in its tmp_path).
COPIES = ROOT / "test-artefacts" / "browser_ui"


def wait_for(what: str, check: Callable[[], Any], server: subprocess.Popen[bytes], log: Path, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        found = check()
        if found:
            return found
        time.sleep(0.25)  # a check is a query or a request: cheap; a second per wait was idle
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


#: The Catalog row (its text, and whether its other cells hold a red mark: Dagster's "failed" red as
#: text, fill or background) of the asset whose description starts with the given words.
CATALOG_ROW = """needle => {
  const leaf = [...document.querySelectorAll('body *')].find(
    e => e.childElementCount === 0 && (e.textContent || '').startsWith(needle));
  let row = leaf;
  while (row && !/\\d+ partitions?/.test(row.innerText)) row = row.parentElement;
  if (!row) return null;
  let cell = leaf;  // the name and description cell (its kind icon is not a status), left out
  while (cell.parentElement !== row) cell = cell.parentElement;
  const red = [...row.querySelectorAll('*')].filter(el => !cell.contains(el)).some(el => {
    const s = getComputedStyle(el);
    return [s.color, s.backgroundColor, s.fill].some(c => {
      const m = c && c.match(/rgba?\\((\\d+), (\\d+), (\\d+)/);
      return m && +m[1] > 170 && +m[2] < 110 && +m[3] < 110;
    });
  });
  return {text: row.innerText, red};
}"""


def dump(page: Any, artefacts: Path, name: str) -> str:
    """The page's screenshot and text into the artefacts (the text is what the assertions read)."""
    skip_community_dialog(page)
    page.screenshot(path=str(artefacts / f"{name}.png"), full_page=True)
    text: str = page.inner_text("body")
    (artefacts / f"{name}.txt").write_text(text)
    return text


def visit(page: Any, url: str, settle_ms: int = 1200) -> None:
    page.goto(url, wait_until="networkidle")
    skip_community_dialog(page)
    page.wait_for_timeout(settle_ms)


@pytest.mark.slow
def test_failing_export_is_red_with_its_account_and_pages_say_why(
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
    created = floor_to_grid(now, 15 * MINUTE_MS) - 35 * MINUTE_MS
    world = World.in_files(tmp_path, created, key_spec)
    secret = f"ui-secret-{uuid.uuid4().hex}"

    def destination(bucket: str) -> DestinationConfig:
        return DestinationConfig(
            "s3",
            bucket,
            prefix="sequenzy",
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIAUIBROWSERTEST",
            secret_access_key=secret,
        )

    def create(account: str, bucket: str) -> Any:
        return world.store.create_export(
            account_id=account,
            destination=destination(bucket),
            datasets=("email_events",),
            frequency="15m",
            lag_ms=MINUTE_MS,
            now_ms=created,
        )

    # The failing export writes to a bucket that does not exist; the healthy ones' bucket exists.
    # They wait paused until the failing export's run has failed alone (a run with a healthy export
    # in it would not fail), then deliver the same day: a later successful run of that day.
    failing = create("acme-failing", f"ui-missing-{uuid.uuid4().hex[:12]}")
    good_bucket = f"ui-good-{uuid.uuid4().hex[:12]}"
    moto.admin_client().create_bucket(Bucket=good_bucket)
    healthy = create("globex-healthy", good_bucket)
    third = create("initech-healthy", good_bucket)
    for export in (healthy, third):
        world.store.set_status(export.id, PAUSED, created)
    # The storage exists before `dagster dev` starts its daemon and webserver (no race between two
    # processes creating the SQLite schema).
    instance = dg.DagsterInstance.from_config(str(home))
    instance.get_runs(limit=1)
    port = free_port()
    log = tmp_path / "dagster_dev.log"
    env = daemon_env(home, world.control_url, world.source_url, key_spec)
    dagster = str(Path(sys.executable).parent / "dagster")
    command = [dagster, "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)]
    base = f"http://127.0.0.1:{port}"
    artefacts = tmp_path / "artefacts"
    artefacts.mkdir()
    try:
        with group_process(command, env=env, log=log) as server:
            wait_for("the webserver answering", lambda: answers(f"{base}/server_info"), server, log, 120)

            def finished(job: str, status: dg.DagsterRunStatus) -> Any:
                runs = instance.get_runs(filters=dg.RunsFilter(job_name=job, statuses=[status]))
                return runs[0] if runs else None

            # Alone in its run, the failing export fails the run (ExportFailed); then its status run
            # fails the export's export_status partition: red.
            run = wait_for(
                "the export's run failing",
                lambda: finished("export_job", dg.DagsterRunStatus.FAILURE),
                server,
                log,
                180,
            )
            for export in (healthy, third):
                world.store.set_status(export.id, ACTIVE, wall_clock_ms())
            state = world.store.get_export(failing.id).dataset_state("email_events")
            assert state is not None and state.failures == 1 and state.last_error
            assert "does not exist" in state.last_error
            retry = run.tags["seqexport/retry"]
            assert retry.startswith("retries at ") and retry.endswith("(attempt 2)")
            status_run = wait_for(
                "the export's status run failing",
                lambda: finished("export_status_job", dg.DagsterRunStatus.FAILURE),
                server,
                log,
                180,
            )
            assert status_run.tags["dagster/partition"] == f"acme-failing/{failing.id}"
            assert status_run.tags["account/acme-failing"] == "yes"

            def delivered() -> bool:
                return all(
                    (state := world.store.get_export(e.id).dataset_state("email_events")) is not None
                    and state.position_ms > created
                    for e in (healthy, third)
                )

            wait_for("the healthy exports' runs", delivered, server, log, 180)
            day = dg.AssetKey("email_events")
            day_key = run.tags["dagster/partition"]

            def cell_not_red() -> bool:
                return bool(instance.get_latest_materialization_event(day))

            wait_for("the red day recorded again", cell_not_red, server, log, 60)
            named = {f"{e.account_id}/{e.id}" for e in (failing, healthy, third)}

            def recorded() -> bool:
                status = dg.AssetKey("export_status")
                return all(
                    instance.fetch_materializations(
                        dg.AssetRecordsFilter(asset_key=status, asset_partitions=[key]), limit=1
                    ).records
                    for key in named
                )

            # Registered by one tick, each partition is recorded (green) by the next.
            wait_for("every export's partition recorded", recorded, server, log, 60)

            def healthy_on_schedule() -> bool:
                # A status recorded before the first delivery may say "behind" (the export was created
                # up to 35 minutes ago); the delivery moves the position, which records it again.
                # A change is recorded as an observation (the first status as a materialization):
                # the partition page shows the newest of either.
                status = dg.AssetKey("export_status")
                for e in (healthy, third):
                    wanted = dg.AssetRecordsFilter(asset_key=status, asset_partitions=[f"{e.account_id}/{e.id}"])
                    records = [
                        *instance.fetch_materializations(wanted, limit=1).records,
                        *instance.fetch_observations(wanted, limit=1).records,
                    ]
                    if not records:
                        return False
                    event = max(records, key=lambda r: r.timestamp).asset_event
                    entry = event.metadata.get("behind email_events") if event else None
                    if entry is None or "on schedule" not in str(entry.value):
                        return False
                return True

            wait_for("the healthy exports' status on schedule", healthy_on_schedule, server, log, 120)

            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
                try:
                    page = browser.new_page(viewport={"width": 1600, "height": 1200})
                    # Dagster's newsletter dialog would cover the screenshots: dismissed as its Skip does.
                    page.add_init_script("window.localStorage.setItem('communityNux', 'true')")

                    # The run page: the customer message and the next retry, and no stack trace.
                    visit(page, f"{base}/runs/{run.run_id}")
                    page.get_by_text("does not exist").first.wait_for(timeout=60_000)
                    text = dump(page, artefacts, "failed_run")
                    assert "does not exist" in text and retry in text, text[-3000:]
                    assert "ExportFailed: bucket " in text and "account acme-failing" in text
                    # Neither the step's failure nor the run-level RUN_FAILURE shows a stack trace: both
                    # lead with the customer message and the retry, and no frame is shown anywhere.
                    step = text[text.index("STEP_FAILURE") : text.index("RUN_FAILURE")]
                    assert "ExportFailed: bucket " in step and retry in step, step
                    run_row = text[text.index("RUN_FAILURE") :]
                    assert "ExportFailed: bucket " in run_row and retry in run_row, run_row[:2000]
                    assert "Stack Trace" not in text and 'File "' not in text, text[-3000:]
                    assert "DagsterExecutionStepExecutionError" not in text and "seqexport_dagster/" not in text
                    assert "Not retrying" not in text
                    assert secret not in text and secret not in page.content()

                    # The Catalog: export_status has a failed partition (red).
                    visit(page, f"{base}/assets")
                    text = dump(page, artefacts, "catalog")
                    row = page.evaluate(CATALOG_ROW, "One partition per export")
                    # Its status column: materialized 2, missing 0, failed 1 (a red dot), in progress 0.
                    assert row is not None and row["text"].split("\n")[-5:] == ["2", "0", "1", "0", "3 partitions"], row
                    assert row["red"], "no red mark in export_status's row"
                    other = page.evaluate(CATALOG_ROW, "One row per email event")
                    assert other is not None and not other["red"], "a healthy dataset's row is marked red"

                    # export_status: partitions named by account; the failing one failed, the healthy
                    # ones materialized (green), none missing.
                    visit(page, f"{base}/assets/export_status?view=partitions")
                    text = dump(page, artefacts, "export_status_partitions")
                    for key in named:
                        assert key in text, text[:3000]
                    assert "Failed (1)" in text and "Materialized (2)" in text, text[:3000]
                    assert "Missing (1)" not in text and "Missing (2)" not in text, text[:3000]
                    # The failing partition's page: account, health, each dataset's behind, last error
                    # and next retry, in one click.
                    visit(page, f"{base}/assets/export_status?view=partitions&partition=acme-failing/{failing.id}")
                    text = dump(page, artefacts, "export_status_failing")
                    assert "failed, and did not materialize this asset" in text, text[-3000:]
                    for entry in ("account", "acme-failing", "health", "failing", "behind email_events", "next_retry"):
                        assert entry in text, (entry, text[-3000:])
                    assert "does not exist" in text and "delivered through" in text, text[-3000:]
                    # A healthy partition's page: green, its account and how far behind it is.
                    visit(page, f"{base}/assets/export_status?view=partitions&partition=globex-healthy/{healthy.id}")
                    text = dump(page, artefacts, "export_status_healthy")
                    assert "Materialized" in text and "globex-healthy" in text, text[-3000:]
                    assert "behind email_events" in text and "on schedule" in text, text[-3000:]
                    assert "did not materialize" not in text, text[-3000:]
                    # The day the failing export's run left red: no longer red, and its page says why.
                    visit(page, f"{base}/assets/email_events?view=partitions&partition={day_key}")
                    text = dump(page, artefacts, "email_events_day")
                    assert "why_not_red" in text and "delivered this day since" in text, text[-3000:]
                    assert "complete" in text and "acme-failing" in text, text[-3000:]
                    assert "did not materialize" not in text, text[-3000:]
                    # Its check, on the asset's own page, names the failing export and its account.
                    visit(page, f"{base}/assets/export_status?view=checks")
                    text = dump(page, artefacts, "export_status_checks")
                    assert "no_failing_exports" in text, text[-3000:]
                    visit(page, f"{base}/assets/export_status?view=checks&checkDetail=no_failing_exports")
                    text = dump(page, artefacts, "export_status_check")
                    assert f"{failing.id} (account acme-failing" in text and healthy.id not in text, text[-3000:]
                    assert third.id not in text, text[-3000:]
                    # The status run of the failing export says why, without a stack trace.
                    visit(page, f"{base}/runs/{status_run.run_id}")
                    text = dump(page, artefacts, "status_run")
                    assert f"Export {failing.id} (account acme-failing) is failing" in text, text[-3000:]
                    assert "Stack Trace" not in text and "seqexport_dagster/" not in text, text[-3000:]

                    # A later tick requests nothing, and its row in the tick list says why: the
                    # cursor column leads with the reason, and the status tag's tooltip is the reason.
                    sensor = f"{base}/locations/seqexport/sensors/scheduler_sensor"

                    def skip_shown() -> bool:
                        visit(page, sensor, 1500)
                        rows = page.locator("tr", has_text="View logs")  # the tick list's rows
                        return bool(rows.count()) and "backoff: acme-failing" in rows.first.inner_text()

                    wait_for("a skipped tick saying why", skip_shown, server, log, 240)
                    row = page.locator("tr", has_text="View logs").first
                    assert "0 runs requested" in row.inner_text(), row.inner_text()
                    row.get_by_text("0 runs requested").first.hover()
                    page.wait_for_timeout(800)
                    dump(page, artefacts, "sensor_tick")
                    tooltip = page.locator("[role=tooltip], .bp5-popover-content, .bp4-popover2-content")
                    shown = " ".join(tooltip.all_inner_texts())
                    assert "backoff: acme-failing (retry " in shown and len(shown) < 120, shown
                finally:
                    browser.close()
    finally:
        instance.dispose()
        world.dispose()
        shutil.rmtree(COPIES, ignore_errors=True)
        shutil.copytree(artefacts, COPIES, dirs_exist_ok=True)
