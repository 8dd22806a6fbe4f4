"""Nothing lost and nothing duplicated, under injected faults (issue 8).

Every scenario drives the real runner against a real moto server through the fault proxy (or kills a
real worker process, or takes a real database away), lets the next attempt run the way the scheduler
would (after the backoff the control plane computed), and then audits the bucket as a customer's
loader reads it. Each runs on a plain and a write-once bucket, and every scenario that writes parts
runs with a gzip JSONL export and with a Parquet one (issue 27). The module prints the scenario
table at the end of the run.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FORMATS, FileFormat, extension, parse_format
from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import AccessDenied, ClockSkew, ExportError, RetryableError
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import Outcome, Stopwatch, format_table, minutes, s3_export, s3_runner
from seqexport_dagster_tests.support.processes import kill_group, start_group
from seqexport_dagster_tests.support.world import DAY0, World

EVENTS = ("email_events", "sms_events", "custom_events")
DAY = dt.date(2026, 9, 30)
SCALE = Scale(subscribers=120, email_sends_per_hour=40, sms_sends_per_hour=10, custom_per_hour=20)
PART_LIMIT = 25

_OUTCOMES: list[Outcome] = []
_CURRENT: dict[str, fp.FaultProxy] = {}  # the running scenario's proxy, for its row of the table


@pytest.fixture(scope="module", autouse=True)
def outcome_table(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not _OUTCOMES:
        return
    table = format_table(_OUTCOMES)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line("Fault scenarios (issue 8):")
            for line in table.splitlines():
                reporter.write_line(line)
    target = os.environ.get("SEQEXPORT_FAULT_TABLE")
    if target:
        Path(target).write_text(table + "\n")


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Iterator[fp.FaultProxy]:
    """Every scenario runs against plain moto and against a write-once bucket (GCS Storage Object
    Creator: 403 on any overwrite, 412 on a create-only precondition), and never overwrites."""
    server = fp.FaultProxy(moto.port, write_once=request.param == "write-once")
    _CURRENT["proxy"] = server
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        _CURRENT.pop("proxy", None)
        server.close()


@pytest.fixture
def s3(moto: Any) -> Any:
    return moto.admin_client()


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> FileFormat:
    """The export's file format: the same faults, names (but the extension) and guarantees for both."""
    return parse_format(request.param)


def seed(world: World, account: str = "acme") -> None:
    generate_account(world.source_engine, account, DAY0 - HOUR_MS, DAY0 + 6 * HOUR_MS, scale=SCALE)


def run_all(runner: Any, export_id: str, datasets: tuple[str, ...] = EVENTS, day: dt.date = DAY) -> dict[str, str]:
    """One scheduled attempt of every dataset; a failing dataset does not stop the others."""
    errors: dict[str, str] = {}
    for dataset in datasets:
        try:
            runner.run_day(export_id, dataset, day)
        except ExportError as exc:
            errors[dataset] = f"{type(exc).__name__}: {exc}"
    return errors


def wait_for_retry(world: World, export_id: str, dataset: str) -> int:
    """Advance the clock as the scheduler would: to the dataset's next retry time. Returns the wait."""
    state = world.store.get_export(export_id).dataset_state(dataset)
    assert state is not None and state.next_retry_at is not None
    wait = max(0, state.next_retry_at - world.clock())
    world.clock.now_ms = state.next_retry_at
    return wait


def assert_failing(world: World, export_id: str, dataset: str, *, contains: str, window: Window | None = None) -> None:
    state = world.store.get_export(export_id).dataset_state(dataset)
    assert state is not None
    assert state.failures >= 1
    assert state.last_error is not None and contains in state.last_error, state.last_error
    assert state.next_retry_at is not None and state.next_retry_at > world.clock()
    if window is not None:
        assert state.last_error_window == window


def record(
    name: str, faults: str, report: Any, watch: Stopwatch, backoff_ms: int | None = None, fmt: FileFormat = "jsonl.gz"
) -> None:
    proxy = _CURRENT.get("proxy")
    _OUTCOMES.append(
        Outcome(
            name,
            faults,
            report.expected,
            report.found,
            report.duplicated,
            watch.seconds(),
            minutes(backoff_ms),
            bucket="write-once" if proxy is not None and proxy.write_once else "plain",
            kept=report.extra,
            overwrites=len(proxy.overwrites) if proxy is not None else 0,
            recognised=len(proxy.precondition_hits) if proxy is not None else 0,
            file_format=fmt,
        )
    )


W12 = Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)


@pytest.mark.parametrize(
    ("name", "make", "error"),
    [
        ("503 SlowDown", fp.slow_down, RetryableError),
        ("500 InternalError", fp.internal_error, RetryableError),
        ("400 RequestTimeout", fp.request_timeout, RetryableError),
        ("reset mid-upload", fp.reset, RetryableError),
    ],
)
def test_persistent_store_fault_fails_the_window_then_the_retry_rewrites_it(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat, name: str, make: Any, error: type[Exception]
) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events", "sms_events"), file_format=fmt)
    # Two botocore attempts instead of the default three keep the suite fast; the transient test
    # below runs the production setting.
    runner = s3_runner(world, part_limit=PART_LIMIT, max_attempts=2)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    assert run_all(runner, export.id, ("email_events", "sms_events")) == {}
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    # Part 0001 of the second window fails on every attempt botocore makes, after part 0000 landed.
    target = f"email_events-{W12.from_ms}-{W12.to_ms}-0001"
    fault = proxy.add(make(match=target, times=None))
    watch = Stopwatch()
    with pytest.raises(error):
        runner.run_day(export.id, "email_events", DAY)
    assert len(proxy.puts(target)) == 2  # botocore's standard mode tried twice, then gave up
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == W12.from_ms  # never ahead of what was written
    assert_failing(world, export.id, "email_events", contains="", window=W12)
    assert run_all(runner, export.id, ("sms_events",)) == {}  # other datasets are not blocked
    proxy.remove(fault)
    wait = wait_for_retry(world, export.id, "email_events")
    runner.run_day(export.id, "email_events", DAY)
    # The retry rewrote the failed window under the same names, not a merged catch-up window.
    assert len(proxy.puts(target)) == 3 and proxy.puts(target)[-1].status == 200
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert report.datasets["email_events"].expected > 0
    assert_format(proxy, fmt)
    record(f"S3 {name}", f"{name} ×∞ on part 0001 of a window", report, watch, wait, fmt)


def test_transient_faults_are_absorbed_inside_the_run(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    ext = extension(fmt)
    proxy.add(fp.slow_down(match=f"-0000{ext}", times=1))
    proxy.add(fp.internal_error(match=f"-0001{ext}", times=1))
    proxy.add(fp.request_timeout(match=f"-0002{ext}", times=1))
    proxy.add(fp.reset(match="sms_events-", times=2))
    proxy.add(fp.delay(0.05, method="PUT", times=None))
    watch = Stopwatch()
    assert run_all(runner, export.id) == {}
    faulted = [r for r in proxy.log if r.fault and r.fault != "delay"]
    assert sorted({r.fault for r in faulted}) == ["InternalError", "RequestTimeout", "SlowDown", "reset"]
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert_format(proxy, fmt)
    record("S3 transient mix", "SlowDown, 500, RequestTimeout, 2 resets, +50 ms/PUT", report, watch, fmt=fmt)


def test_response_slower_than_the_read_timeout_is_retried(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("custom_events",), file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT, read_timeout=0.5)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    # The store receives the upload, then answers too late: the object exists but the client saw a
    # timeout. Every re-send (botocore's own, or the next attempt's) carries the create-only
    # precondition, so the store answers 412 and the part counts as landed: never overwritten.
    slow = proxy.add(fp.delay(1.0, match="custom_events-", times=3))
    watch = Stopwatch()
    wait = None
    try:
        runner.run_day(export.id, "custom_events", DAY)
    except RetryableError as exc:  # all three sends timed out before the first one landed
        assert re.search("interrupted|timed out|timeout", str(exc))
        assert_failing(world, export.id, "custom_events", contains="")
        wait = wait_for_retry(world, export.id, "custom_events")
        runner.run_day(export.id, "custom_events", DAY)
    assert slow.fired >= 2
    assert proxy.precondition_hits, "the part that landed unanswered was recognised by its 412"
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert_format(proxy, fmt)
    record("S3 slow responses", "1 s responses vs 0.5 s read timeout ×3", report, watch, wait, fmt)


def test_revoked_credentials_fail_permanently_until_access_returns(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    seed(world)
    both = ("email_events", "custom_events")
    export = s3_export(world, s3, proxy, datasets=both, file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    assert run_all(runner, export.id, both) == {}
    denied = proxy.add(fp.access_denied(match=f"/{s3_bucket(world, export.id)}/"))
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    watch = Stopwatch()
    waits = 0
    for attempt in (1, 2):
        before = len(proxy.log)
        errors = run_all(runner, export.id, both)
        assert set(errors) == set(both) and all("AccessDenied" in e for e in errors.values())
        assert len(proxy.log) - before == 2  # permanent: one request per dataset, no in-run retry
        for dataset in both:
            assert_failing(world, export.id, dataset, contains="s3:PutObject")
        state = world.store.get_export(export.id).dataset_state("email_events")
        assert state is not None and state.failures == attempt
        waits += wait_for_retry(world, export.id, "email_events")
    assert waits == HOUR_MS + 2 * HOUR_MS  # backoff doubles from the frequency
    proxy.remove(denied)  # the customer fixes the bucket policy
    assert run_all(runner, export.id, both) == {}
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert_format(proxy, fmt)
    record("S3 access revoked", "403 AccessDenied for 2 attempts, then granted", report, watch, waits, fmt)
    with pytest.raises(AccessDenied):  # and it is the permanent branch of the tree
        proxy.add(fp.access_denied())
        world.clock.advance(HOUR_MS)
        runner.run_day(export.id, "email_events", DAY)


def test_clock_skew_fails_fast_with_a_clear_error(world: World, s3: Any, proxy: fp.FaultProxy) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events",))
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    skew = proxy.add(fp.clock_skewed(times=None))
    watch = Stopwatch()
    started = time.monotonic()
    with pytest.raises(ClockSkew, match="clock is off"):
        runner.run_day(export.id, "email_events", DAY)
    assert time.monotonic() - started < 2.0
    assert len(proxy.puts()) == 1  # no in-run retry of a permanent error
    assert_failing(world, export.id, "email_events", contains="clock")
    proxy.remove(skew)
    wait = wait_for_retry(world, export.id, "email_events")
    runner.run_day(export.id, "email_events", DAY)
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert skew.fired == 1
    record("clock skew", "403 RequestTimeTooSkewed", report, watch, wait)


def s3_bucket(world: World, export_id: str) -> str:
    return world.store.destination_config(export_id)[0].bucket


def assert_format(proxy: fp.FaultProxy, fmt: FileFormat) -> None:
    """Every part the scenario sent is in the export's format (the audit read them all back)."""
    parts = [r.path for r in proxy.puts() if "/_sequenzy/" not in r.path and not r.path.endswith("/_SUCCESS")]
    assert parts and all(p.endswith(extension(fmt)) for p in parts), parts[:5]


# Process faults ---------------------------------------------------------------------------------


@pytest.fixture
def keyed_world(tmp_path: Path) -> Iterator[tuple[World, str]]:
    """A SQLite world whose credential keys a worker process can be given."""
    spec = new_key_spec("t1")
    world = World.in_files(tmp_path, DAY0, spec)
    try:
        yield world, spec
    finally:
        world.dispose()


def start_worker(world: World, spec: str, export_id: str, dataset: str, day: dt.date) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SEQEXPORT_SECRET_KEYS": spec}
    argv = [
        world.control_url,
        world.source_url,
        export_id,
        dataset,
        day.isoformat(),
        str(world.clock()),
        str(PART_LIMIT),
    ]
    return start_group(
        [sys.executable, "-m", "seqexport_dagster_tests.support.faults.worker", *argv],
        cwd=None,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kill_on(proxy: fp.FaultProxy, match: str, holder: dict[str, subprocess.Popen[bytes]]) -> fp.Fault:
    """SIGKILL the worker when its PUT of ``match`` arrives; the PUT itself still lands afterwards."""

    def kill() -> None:
        kill_group(holder["worker"])
        deadline = time.monotonic() + 10
        while holder["worker"].poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    return proxy.add(fp.call(kill, match=match))


def run_killed_worker(
    world: World, spec: str, proxy: fp.FaultProxy, export_id: str, dataset: str, day: dt.date, match: str
) -> None:
    holder: dict[str, subprocess.Popen[bytes]] = {}
    kill_on(proxy, match, holder)
    holder["worker"] = worker = start_worker(world, spec, export_id, dataset, day)
    try:
        assert worker.wait(timeout=60) == -signal.SIGKILL, worker.stderr.read() if worker.stderr else b""
    finally:
        if worker.poll() is None:
            kill_group(worker)
        if worker.stderr:
            worker.stderr.close()
    proxy.wait_idle()


def test_worker_killed_mid_window_then_rerun(
    keyed_world: tuple[World, str], s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    world, spec = keyed_world
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events",), file_format=fmt)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    watch = Stopwatch()
    run_killed_worker(world, spec, proxy, export.id, "email_events", DAY, "email_events-")
    assert proxy.puts("email_events-")  # the run got as far as its first PUT
    run_killed_worker(world, spec, proxy, export.id, "email_events", DAY, f"-0004{extension(fmt)}")
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == DAY0  # nothing committed by the killed runs
    # The second worker's attempt closed the first one's as lost; its own is left running.
    assert [w.status for w in world.store.ledger(export.id)] == ["failed", "running"]
    s3_runner(world, part_limit=PART_LIMIT).run_day(export.id, "email_events", DAY)
    assert [w.status for w in world.store.ledger(export.id)] == ["failed", "failed", "committed"]
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert_format(proxy, fmt)
    record("SIGKILL mid-window", "worker killed at part 0000, then at part 0004", report, watch, fmt=fmt)


def test_worker_killed_mid_snapshot_then_rerun(
    keyed_world: tuple[World, str], s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    world, spec = keyed_world
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("subscribers",), file_format=fmt)
    world.clock.now_ms = DAY0 + DAY_MS + 3 * MINUTE_MS
    watch = Stopwatch()
    run_killed_worker(world, spec, proxy, export.id, "subscribers", DAY, "subscribers-0002")
    keys = proxy.put_keys_in_order(s3_bucket(world, export.id))
    assert keys and not any(k.endswith("_SUCCESS") for k in keys)  # an incomplete snapshot is never marked
    s3_runner(world, part_limit=PART_LIMIT).run_day(export.id, "subscribers", DAY)
    watch.stop()
    order = proxy.put_keys_in_order(s3_bucket(world, export.id))
    assert order[-1].endswith("_SUCCESS")
    report = audit_export(world.store, world.source_engine, s3, export.id, put_order=order)
    report.assert_clean()
    assert report.datasets["subscribers"].expected == SCALE.subscribers
    assert_format(proxy, fmt)
    record("SIGKILL mid-snapshot", "worker killed at part 0002 of 5", report, watch, fmt=fmt)


def pg_admin(sql: str) -> None:
    admin = sa.create_engine("postgresql+psycopg2://postgres@127.0.0.1:5432/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        admin.dispose()


def take_away(url: str) -> None:
    """The database refuses new connections and loses its current ones, as in a failover."""
    name = sa.make_url(url).database
    pg_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    pg_admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")


def give_back(url: str) -> None:
    pg_admin(f'ALTER DATABASE "{sa.make_url(url).database}" ALLOW_CONNECTIONS true')


@pytest.mark.postgres
def test_control_plane_unavailable_mid_window(pg_world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat) -> None:
    world = pg_world
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events",), file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    ext = extension(fmt)
    proxy.add(fp.call(lambda: take_away(world.control_url), match=f"-0003{ext}"))
    watch = Stopwatch()
    try:
        with pytest.raises(RetryableError, match="control-plane database unavailable"):
            runner.run_day(export.id, "email_events", DAY)
        # The part whose PUT took the database away landed; nothing after it was sent.
        assert [r.path.rsplit("-", 1)[-1] for r in proxy.puts()][-1] == f"0003{ext}"
    finally:
        give_back(world.control_url)
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == DAY0  # nothing committed wrongly
    runner.run_day(export.id, "email_events", DAY)
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert_format(proxy, fmt)
    record("control plane down", "PostgreSQL control plane gone at part 0003", report, watch, fmt=fmt)


@pytest.mark.postgres
def test_source_unavailable_then_back(pg_world: World, s3: Any, proxy: fp.FaultProxy) -> None:
    world = pg_world
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events", "custom_events"))
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    assert run_all(runner, export.id, ("email_events", "custom_events")) == {}
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    watch = Stopwatch()
    take_away(world.source_url)
    try:
        errors = run_all(runner, export.id, ("email_events", "custom_events"))
        assert set(errors) == {"email_events", "custom_events"}
        assert all("RetryableError: source database" in e for e in errors.values()), errors
        assert_failing(world, export.id, "email_events", contains="source database", window=W12)
    finally:
        give_back(world.source_url)
    wait = wait_for_retry(world, export.id, "email_events")
    assert run_all(runner, export.id, ("email_events", "custom_events")) == {}
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    record("source down", "PostgreSQL source refuses connections", report, watch, wait)


# Data faults ------------------------------------------------------------------------------------


def delete_rows(world: World, dataset: str, ids: list[str]) -> None:
    with world.source_engine.begin() as conn:
        conn.execute(
            sa.text(f"DELETE FROM {dataset} WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        )


def test_rows_deleted_between_attempts_retry_resumes_without_rewriting(
    keyed_world: tuple[World, str], s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    world, spec = keyed_world
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events",), file_format=fmt)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    window = Window(DAY0, DAY0 + 3 * HOUR_MS)
    watch = Stopwatch()
    # The worker dies with the PUT of part 0005 in flight: it lands, the worker never learns of it.
    run_killed_worker(world, spec, proxy, export.id, "email_events", DAY, f"-0005{extension(fmt)}")
    landed = set(proxy.put_keys_in_order(s3_bucket(world, export.id)))
    assert not proxy.errors, (proxy.errors, proxy.log[-3:])
    assert part_key("sequenzy", "email_events", window, 5, fmt) in landed
    # Then the earliest 150 rows of the window are erased, among them every row of the part that
    # landed unannounced. The retry sends that part again (the store says it exists: nothing is
    # replaced), leaves parts 0000-0004 as they are, and continues after part 0005's boundary.
    with world.source_engine.connect() as conn:
        doomed = [r[0] for r in conn.execute(sa.text(
            "SELECT id FROM email_events WHERE account_id='acme' AND recorded_at > :f AND recorded_at <= :t "
            "ORDER BY recorded_at, id LIMIT 150"), {"f": iso_ms(window.from_ms), "t": iso_ms(window.to_ms)})]  # fmt: skip
    delete_rows(world, "email_events", doomed)
    result = s3_runner(world, part_limit=PART_LIMIT).run_day(export.id, "email_events", DAY)
    (w,) = result.windows
    assert w.window == window and (w.sent.skipped, w.sent.resent, w.sent.existed) == (5, 1, 1)
    assert w.parts == 10 and w.sent.parts == 4
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    # Delivered rows stay delivered: the erased ones remain in the parts that carried them.
    report.assert_clean(allow_extra=True)
    assert report.extra == 150
    assert_format(proxy, fmt)
    record("rows deleted between attempts", "kill with part 0005 in flight, 150 rows erased", report, watch, fmt=fmt)


def test_late_rows_are_missed_then_appended_as_new_parts(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events", "custom_events"), file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT)
    for hour in (1, 2, 3):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * MINUTE_MS
        assert run_all(runner, export.id, ("email_events", "custom_events")) == {}
    assert reconcile(runner, export.id) and not any(r.changed for r in reconcile(runner, export.id))
    before = {r.path for r in proxy.puts()}
    sent_before = len(proxy.puts())
    # 60 rows whose writes became visible long after the time they carry, inside window (1h, 2h].
    late = [
        (
            "acme", f"eev_late_{i:04d}", "delivered", iso_ms(W12.from_ms + 1000 * i), iso_ms(W12.from_ms + 1000 * i + 5),
            "sub_acme_0000001", "late@example.com", None, None, f"msg_late_{i}", "Late", None, None, None, None, None,
        )
        for i in range(60)
    ]  # fmt: skip
    insert_rows(world.source_engine, "email_events", late)
    watch = Stopwatch()
    missed = audit_export(world.store, world.source_engine, s3, export.id)
    assert missed.datasets["email_events"].missing == 60  # the documented guarantee: the window missed them
    results = reconcile(runner, export.id)
    changed = [r for r in results if r.changed]
    assert [(r.dataset, r.window, r.late_rows) for r in changed] == [("email_events", W12, 60)]
    appended = {r.path for r in proxy.puts()} - before
    assert appended and all(f"-{W12.from_ms}-{W12.to_ms}-" in p for p in appended)  # that window only
    assert not {r.path for r in proxy.puts()[sent_before:]} & before, "new part numbers only, nothing sent again"
    watch.stop()
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == DAY0 + 3 * HOUR_MS  # positions untouched
    assert_format(proxy, fmt)
    record("late rows + reconcile", "60 rows recorded inside an exported window", report, watch, fmt=fmt)


def test_answer_lost_after_the_part_landed_is_recognised_not_rewritten(
    world: World, s3: Any, proxy: fp.FaultProxy, fmt: FileFormat
) -> None:
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events",), file_format=fmt)
    runner = s3_runner(world, part_limit=PART_LIMIT)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    target = f"email_events-{W12.from_ms}-{W12.to_ms}-0001"
    lost = proxy.add(fp.lost_reply(match=target, times=1))
    watch = Stopwatch()
    report = runner.run_day(export.id, "email_events", DAY)  # botocore re-sends; the store says 412
    watch.stop()
    assert lost.fired == 1
    assert [r.status for r in proxy.puts(target)] == [200, 412]
    (w12,) = [w for w in report.windows if w.window == W12]
    assert w12.sent.existed == 1 and w12.sent.parts == w12.parts - 1
    audit = audit_export(world.store, world.source_engine, s3, export.id)
    audit.assert_clean()
    assert_format(proxy, fmt)
    record("answer lost", "part 0001 landed, its answer reset", audit, watch, fmt=fmt)


@pytest.mark.parametrize("write_once", [False, True], ids=["plain", "write-once"])
def test_soak_loses_duplicates_and_overwrites_nothing(write_once: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """The soak (benchmarks/soak.py) in small: random faults, outages and late rows over many exports."""
    from benchmarks import soak

    code = soak.main(["--exports", "6", "--minutes", "90", "--seed", "3", *(["--write-once"] if write_once else [])])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PUTs to an existing key: 0" in out and "RESULT: PASS" in out
