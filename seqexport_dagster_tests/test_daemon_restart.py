"""The real `dagster-daemon`, killed with SIGKILL (its whole process group) and started again.

Two kills: one while a run is writing a window (its first PUT is in flight, so the run worker, the
code server and the daemon die together and the part lands unannounced), and one between ticks.
After each restart the bucket must end complete (every source row once, windows chained, no
duplicate) and the run history consistent: no run left STARTED forever.

With the default run launcher a run whose worker died stays STARTED: the launcher cannot check a
worker's health, so run monitoring can only end it by its maximum runtime (``dagster.yaml``
``run_monitoring.max_runtime_seconds``; shortened here). Until then the orphan counts as the
export's one run, so the export waits; afterwards the run is marked failed, run retries (or the
sensor) launch it again, and the window is rewritten under the same names.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, floor_to_grid
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.store import COMMITTED
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.processes import daemon_env, group_gone, kill_group, start_daemon, stop_group
from seqexport_dagster_tests.support.world import World

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("email_events", "sms_events")
LAG_MS = MINUTE_MS
#: Short for the test; dagster.yaml's own value is what production locally waits.
MAX_RUNTIME_S = 8
FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@pytest.fixture
def proxy(moto: Any) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(moto.port)
    try:
        yield server
    finally:
        server.close()


#: Every wait below returns as soon as its condition holds; its bound only says when to give up.
#: Under a loaded host (two xdist workers beside other work) the daemon's ticks, run launches and
#: run workers come slower: the restart's catch-up took more than 60 s once, 45 s on its own.
PATIENCE = 3


def wait_for(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    timeout *= PATIENCE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{log.read_text()[-3000:]}")


class Daemon:
    """`dagster-daemon run` in its own process group, its output appended to one log."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = start_daemon(self.env, self.log)

    def kill(self) -> None:
        """SIGKILL of the whole group: the daemon, its code server and any run worker it launched."""
        assert self.process is not None
        kill_group(self.process)

    def reap(self) -> int:
        assert self.process is not None
        self.process.wait(timeout=10)
        pgid = self.process.pid
        wait_for("the killed process group to be empty", lambda: group_gone(pgid), 10, self.log)
        return pgid

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)


def instance_yaml(home: Path) -> None:
    """The repository's dagster.yaml, with run monitoring shortened so the test stays short."""
    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    assert config["run_monitoring"]["enabled"] and config["run_monitoring"]["max_runtime_seconds"] > 0
    config["run_monitoring"].update(poll_interval_seconds=1, max_runtime_seconds=MAX_RUNTIME_S)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))


def export_runs(instance: dg.DagsterInstance, export_id: str) -> list[dg.DagsterRun]:
    """Its delivery runs (a run of at most 5 exports names each in a tag; status runs are another job)."""
    return list(instance.get_runs(filters=dg.RunsFilter(job_name="export_job", tags={f"export/{export_id}": "yes"})))


@pytest.mark.slow
def test_daemon_killed_mid_run_and_between_ticks_leaves_a_complete_bucket(tmp_path, moto, proxy, monkeypatch):
    started = time.monotonic()
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance_yaml(home)
    key_spec = new_key_spec("restart")
    bucket = f"restart-{uuid.uuid4().hex[:12]}"
    s3 = moto.admin_client()
    s3.create_bucket(Bucket=bucket)
    now = wall_clock_ms()
    created = floor_to_grid(now - 50 * MINUTE_MS, MINUTE_MS)
    world = World.in_files(tmp_path, now, key_spec)
    generate_account(
        world.source_engine,
        "acme",
        now - 2 * HOUR_MS,
        now + HOUR_MS,
        scale=Scale(subscribers=50, email_sends_per_hour=60),
    )
    export = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            bucket,
            prefix="sequenzy",
            region="us-east-1",
            endpoint=proxy.endpoint,
            access_key_id="AKIARESTART",
            secret_access_key="restart-secret",
        ),
        datasets=DATASETS,
        frequency="15m",
        lag_ms=LAG_MS,
        now_ms=created,
    )
    env = daemon_env(home, world.control_url, world.source_url, key_spec)
    log = tmp_path / "daemon.log"
    daemon = Daemon(env, log)
    instance = dg.DagsterInstance.from_config(str(home))

    def positions() -> dict[str, int]:
        return {s.dataset: s.position_ms for s in world.store.get_export(export.id).datasets}

    try:
        # 1. Kill while the first part of the first window is on its way to the store.
        proxy.add(fp.call(daemon.kill, match=f"/{bucket}/sequenzy/email_events/"))
        daemon.start()
        wait_for("a run to start writing", lambda: proxy.puts(f"/{bucket}/sequenzy/email_events/"), 60, log)
        daemon.reap()
        marks = {"first PUT, kill": time.monotonic() - started}
        proxy.wait_idle()
        landed = [r for r in proxy.puts(f"/{bucket}/sequenzy/email_events/") if r.status == 200]
        assert landed, "the PUT in flight at the kill still lands: an unannounced part"
        (orphan,) = export_runs(instance, export.id)
        assert orphan.status == dg.DagsterRunStatus.STARTED  # nobody is left to say otherwise
        assert positions() == dict.fromkeys(DATASETS, created)  # nothing was committed
        killed_at = time.monotonic()

        # 2. Restart: the orphan holds the export's lease until its maximum runtime, then fails; the
        #    relaunched run takes the dead run's lease over (no TTL wait) and rewrites the window
        #    under the same names.
        daemon.start()
        target = floor_to_grid(wall_clock_ms() - LAG_MS, 15 * MINUTE_MS)
        wait_for(
            "the export to catch up after the restart",
            lambda: all(p >= target for p in positions().values()),
            60,
            log,
        )
        recovered_s = time.monotonic() - killed_at
        marks["caught up after restart 1"] = time.monotonic() - started
        orphan = instance.get_run_by_id(orphan.run_id)
        assert orphan is not None and orphan.status == dg.DagsterRunStatus.FAILURE
        # Positions move window by window: the relaunched run may still be finishing.
        wait_for(
            "the relaunched run to succeed",
            lambda: any(r.status == dg.DagsterRunStatus.SUCCESS for r in export_runs(instance, export.id)),
            30,
            log,
        )
        audit_export(world.store, world.source_engine, s3, export.id).assert_clean()

        # 3. Kill between ticks (no run in flight), ask for "export now", start again.
        wait_for(
            "every run to finish",
            lambda: all(r.status in FINISHED for r in export_runs(instance, export.id)),
            30,
            log,
        )
        daemon.kill()
        daemon.reap()
        marks["idle kill"] = time.monotonic() - started
        asked = wall_clock_ms()
        world.store.request_export_now(export.id, asked)
        daemon.start()
        wait_for(
            "export now after the second restart",
            lambda: all(p >= asked - LAG_MS for p in positions().values()),
            60,
            log,
        )
        marks["export now done after restart 2"] = time.monotonic() - started
        wait_for(
            "every run to finish",
            lambda: all(r.status in FINISHED for r in export_runs(instance, export.id)),
            30,
            log,
        )
    finally:
        daemon.stop()

    # The bucket: every source row up to the position exactly once, chained, nothing duplicated.
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert report.found == report.expected > 0 and report.duplicated == 0
    # The ledger: no attempt left running; every window committed once at least.
    ledger = world.store.ledger(export.id)
    assert all(w.status != "running" for w in ledger), [(w.window, w.status) for w in ledger]
    assert any(w.status == COMMITTED for w in ledger)
    # Run history: every run finished; the orphan failed (run monitoring), the others succeeded.
    runs = export_runs(instance, export.id)
    statuses = {r.run_id: r.status for r in runs}
    assert statuses.pop(orphan.run_id) == dg.DagsterRunStatus.FAILURE
    assert statuses and all(s == dg.DagsterRunStatus.SUCCESS for s in statuses.values()), statuses
    messages = [e.message for e in instance.all_logs(orphan.run_id) if e.dagster_event]
    assert any("maximum runtime" in (m or "") for m in messages), messages
    elapsed = time.monotonic() - started
    timeline = ", ".join(f"{k} {v:.1f} s" for k, v in marks.items())
    summary = f"recovered {recovered_s:.1f} s after the kill; {len(runs)} runs; {timeline}; total {elapsed:.1f} s"
    print(f"daemon restart: {summary}")  # noqa: T201 - the figure for the report
    instance.dispose()
    world.dispose()
