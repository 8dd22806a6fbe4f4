"""Issue 23, item 3: retention in the control plane (`seqexport maintain`, `store.compaction`).

A world with 18 days of real deliveries (local bucket, every dataset, a failed attempt, a run that
wrote nothing): `status`, `history` and `verify --ledger` answer the same before and after the days
older than 14 are compacted; a second pass removes nothing; a file lost from a compacted day is
still found; a backfill of a compacted day still knows its windows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster import cli
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.management.verify import verify_location
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.maintenance import MaintenanceReport, maintain
from seqexport_dagster.store.run_log import RunLog
from seqexport_dagster.store.tables import parts, run_log, window_days, windows
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.cli_harness import env_for
from seqexport_dagster_tests.support.faults.proxy import FaultProxy
from seqexport_dagster_tests.support.faults.scene import ACCESS_KEY, SECRET_KEY, s3_export, s3_runner
from seqexport_dagster_tests.support.world import ALL_DATASETS, DAY0, Clock, World, postgres_database

DAYS = 18
SMALL = Scale(subscribers=15, email_sends_per_hour=4, sms_sends_per_hour=1, custom_per_hour=2)


@contextmanager
def world_on(backend: str, root: Path, spec: str) -> Iterator[World]:
    if backend == "sqlite":
        world = World.in_files(root, DAY0, spec)
        try:
            yield world
        finally:
            world.dispose()
        return
    with postgres_database() as control, postgres_database() as source:
        world = World(root, control, source, Clock(DAY0), box=SecretBox.parse(spec))
        try:
            yield world
        finally:
            world.dispose()


def deliver_days(world: World, days: int) -> str:
    """``days`` days of every dataset, delivered day by day as the schedule would, with run-log entries."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + days * DAY_MS, scale=SMALL)
    export = world.local_export("acme", frequency="6h")
    runner = world.runner(part_limit=20)
    log = RunLog(world.control_engine)
    for d in range(days):
        day = Window(DAY0 + d * DAY_MS, DAY0 + (d + 1) * DAY_MS).day
        for slot in range(1, 5):  # every 6 hours, 3 minutes after the window closes
            world.clock.now_ms = DAY0 + d * DAY_MS + slot * 6 * HOUR_MS + 3 * MINUTE_MS
            if (d, slot) == (1, 1):  # a failed attempt, retried at once, and a run that wrote nothing
                wid = world.store.start_window(
                    export.id, "email_events", Window(DAY0 + DAY_MS, DAY0 + DAY_MS + 6 * HOUR_MS),
                    run_id="run-broken", location=export.location, now_ms=world.clock(),
                )  # fmt: skip
                world.store.fail_window(wid, error="access denied", now_ms=world.clock())
                log.start("run-paused", export.id, "sms_events", day.isoformat(), "manual", world.clock())
                log.finish("run-paused", export.id, "sms_events", "canceled", world.clock(), "export is paused")
            run_id = f"run-{d}-{slot}"
            for dataset in ALL_DATASETS:
                log.start(run_id, export.id, dataset, day.isoformat(), "scheduled", world.clock())
                runner.run_day(export.id, dataset, day, run_id=run_id)
                log.finish(run_id, export.id, dataset, "succeeded", world.clock())
    return export.id


def cli_json(world: World, spec: str, capsys: Any, *argv: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = cli.main([*argv, "--json"], env=env_for(world, spec), clock=world.clock)
    return code, json.loads(capsys.readouterr().out)


def answers(world: World, spec: str, capsys: Any, export_id: str) -> dict[str, Any]:
    bucket = str(world.root / "bucket")
    return {
        "status": cli_json(world, spec, capsys, "status", export_id),
        "history": cli_json(world, spec, capsys, "history", export_id),
        "verify": cli_json(world, spec, capsys, "verify", bucket, "--ledger", export_id),
        "backfill_windows": [
            world.store.committed_windows(export_id, d, f"2026-10-0{n}") for d in ALL_DATASETS for n in (1, 2, 5)
        ],
    }


def count(world: World, table: sa.Table) -> int:
    with world.control_engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_maintain_compacts_old_days_and_every_answer_stays_the_same(backend: str, tmp_path: Path, capsys: Any) -> None:
    spec = new_key_spec("t1")
    with world_on(backend, tmp_path, spec) as world:
        export_id = deliver_days(world, DAYS)
        before = answers(world, spec, capsys, export_id)
        assert before["verify"][0] == 0 and before["verify"][1]["problems"] == []
        assert len(before["history"][1]) > 0
        windows_before, parts_before, log_before = count(world, windows), count(world, parts), count(world, run_log)

        old = DAY0 + 3 * DAY_MS
        with world.control_engine.connect() as conn:
            old_windows = conn.execute(sa.select(sa.func.count()).where(windows.c.from_ms < old)).scalar_one()
            old_log = conn.execute(sa.select(sa.func.count()).where(run_log.c.date < "2026-10-03")).scalar_one()

        code, report = cli_json(world, spec, capsys, "maintain")
        assert code == 0, report
        # now = day 18 + 3 min: days 0-2 end before the cutoff; day 3's last run started right at it.
        assert report["days_compacted"] == 3 * len(ALL_DATASETS)
        assert report["windows_removed"] == old_windows and old_windows >= 3 * 3 * 4 + 1
        assert report["run_log_removed"] == old_log and old_log >= 3 * 4 * len(ALL_DATASETS) + 1
        assert count(world, windows) == windows_before - report["windows_removed"]
        assert count(world, parts) == parts_before - report["parts_removed"] and report["parts_removed"] > 0
        assert count(world, run_log) == log_before - report["run_log_removed"]
        with world.control_engine.connect() as conn:
            oldest = conn.execute(sa.select(sa.func.min(windows.c.from_ms))).scalar_one()
            summaries = conn.execute(sa.select(window_days)).all()
        assert oldest == DAY0 + 3 * DAY_MS
        assert {s.date for s in summaries} == {"2026-09-30", "2026-10-01", "2026-10-02"}
        email = [s for s in summaries if s.dataset == "email_events"]
        assert all(s.windows == 4 and s.bounds is None and len(s.md5_digest) == 64 for s in email)

        assert answers(world, spec, capsys, export_id) == before

        # Idempotent: nothing more to remove.
        code, again = cli_json(world, spec, capsys, "maintain")
        assert code == 0 and again["days_compacted"] == 0 and again["windows_removed"] == 0
        assert answers(world, spec, capsys, export_id) == before

        # A file lost from a compacted day is still reported against the summary.
        lost = next((world.root / "bucket" / "email_events" / "date=2026-10-01").iterdir())
        lost.unlink()
        code, verified = cli_json(world, spec, capsys, "verify", str(world.root / "bucket"), "--ledger", export_id)
        assert code != 0
        kinds = {p["kind"] for p in verified["problems"]}
        assert "ledger_window_missing" in kinds or "ledger_rows_mismatch" in kinds, verified["problems"]


def test_maintain_text_output_names_what_it_removed(tmp_path: Path, capsys: Any) -> None:
    spec = new_key_spec("t1")
    with world_on("sqlite", tmp_path, spec) as world:
        # Two delivered days, then the clock where 16 would leave it: days 0-1 fall past the horizon.
        # What is removed, not how much, is what the text names (16 days cost 8 times the deliveries).
        deliver_days(world, 2)
        world.clock.now_ms = DAY0 + 16 * DAY_MS + 3 * MINUTE_MS
        capsys.readouterr()
        assert cli.main(["maintain"], env=env_for(world, spec), clock=world.clock) == 0
        captured = capsys.readouterr()
        assert "days compacted into summaries" in captured.out
        assert "window attempts removed" in captured.out
        assert "maintenance: compacting" in captured.err


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    """An ordinary bucket and a create-only one (GCS Storage Object Creator), both through the proxy
    that counts overwrites (there must be none)."""
    server = FaultProxy(moto.port, write_once=request.param == "write-once")
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        server.close()


def test_maintain_beside_deliveries_and_backfills_loses_nothing(pg_world: World, moto: Any, proxy: FaultProxy) -> None:
    """Maintenance passes in a thread, over and over, while the main thread delivers four more days
    every 6 hours and backfills days that are being compacted; the bucket audit finds nothing missing."""
    world = pg_world
    s3 = moto.admin_client()
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 20 * DAY_MS, scale=SMALL)
    export = s3_export(world, s3, proxy, frequency="6h")
    runner = s3_runner(world, part_limit=20)
    events = ("email_events", "sms_events", "custom_events")

    def deliver(d: int) -> None:
        day = Window(DAY0 + d * DAY_MS, DAY0 + (d + 1) * DAY_MS).day
        for slot in range(1, 5):
            world.clock.now_ms = DAY0 + d * DAY_MS + slot * 6 * HOUR_MS + 3 * MINUTE_MS
            for dataset in events:
                runner.run_day(export.id, dataset, day, run_id=f"run-{d}-{slot}")

    for d in range(16):
        deliver(d)
    stop = threading.Event()
    passes: list[MaintenanceReport] = []
    errors: list[BaseException] = []

    def keep_maintaining() -> None:
        try:
            while not stop.is_set():
                passes.append(maintain(world.control_engine, world.clock()))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    worker = threading.Thread(target=keep_maintaining, daemon=True)
    worker.start()
    try:
        for d in range(16, 20):
            deliver(d)
            back = Window(DAY0 + (d - 15) * DAY_MS, DAY0 + (d - 14) * DAY_MS).day  # compacted, or about to be
            for dataset in events:
                runner.run_day(export.id, dataset, back, run_id=f"backfill-{d}", rewrite=True)
    finally:
        stop.set()
        worker.join(timeout=120)
    assert not errors, errors
    assert len(passes) >= 2
    final = maintain(world.control_engine, world.clock())
    assert sum(p.compaction.days for p in [*passes, final]) >= 3 * 5
    assert maintain(world.control_engine, world.clock()).compaction.days == 0  # idempotent
    with world.control_engine.connect() as conn:
        old_runs = set(conn.execute(sa.select(windows.c.run_id).where(windows.c.from_ms < DAY0 + 5 * DAY_MS)).scalars())
        summarized = conn.execute(sa.select(sa.func.count()).select_from(window_days)).scalar_one()
    # What is left of days 0-4 is only the recent backfills of days 1-4 (kept whole: they started
    # inside the horizon); their first deliveries are in the summaries.
    assert old_runs <= {f"backfill-{d}" for d in range(16, 20)}, old_runs
    assert summarized >= 3 * 5
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert report.expected > 0 and report.found == report.expected
    # verify --ledger still agrees with the bucket over compacted and live days alike.
    checked = verify_location(
        f"s3://{export.bucket}/{export.prefix}",
        s3_endpoint=moto.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region="us-east-1",
        ledger=(world.store, export.id),
    )
    assert checked.ok, checked.render()


def test_maintain_refuses_the_http_api_and_names_the_variable() -> None:
    """Maintenance needs the control-plane database itself, never a remote API client."""
    import argparse

    from seqexport_dagster.cli.maintain import maintain as maintain_command
    from seqexport_dagster.cli.render import Output
    from seqexport_dagster.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        maintain_command(argparse.Namespace(), object(), Output(False))  # type: ignore[arg-type]
    assert refused.value.field == "SEQEXPORT_API_URL" and "control-plane database" in str(refused.value)


def test_verify_ledger_of_both_places_after_a_move_and_compaction(tmp_path: Path, capsys: Any) -> None:
    """Days 0-2 went to folder A, the rest to B after a destination change; once days 0-2 are
    compacted, `verify --ledger` of each place still compares exactly the windows that live there."""
    from seqexport_dagster.destination.config import DestinationConfig

    spec = new_key_spec("t1")
    with world_on("sqlite", tmp_path, spec) as world:
        generate_account(world.source_engine, "acme", DAY0, DAY0 + DAYS * DAY_MS, scale=SMALL)
        export = world.local_export("acme", frequency="6h", datasets=("email_events",))
        runner = world.runner(part_limit=20)
        for d in range(DAYS):
            day = Window(DAY0 + d * DAY_MS, DAY0 + (d + 1) * DAY_MS).day
            for slot in range(1, 5):
                world.clock.now_ms = DAY0 + d * DAY_MS + slot * 6 * HOUR_MS + 3 * MINUTE_MS
                if (d, slot) == (3, 1):
                    moved = DestinationConfig("local", str(world.root / "moved"))
                    world.store.update_destination(export.id, moved, world.clock())
                runner.run_day(export.id, "email_events", day, run_id=f"run-{d}-{slot}")
        places = {"A": str(world.root / "bucket"), "B": str(world.root / "moved")}

        def verified() -> dict[str, Any]:
            return {k: cli_json(world, spec, capsys, "verify", v, "--ledger", export.id) for k, v in places.items()}

        before = verified()
        assert all(code == 0 and report["problems"] == [] for code, report in before.values()), before
        code, report = cli_json(world, spec, capsys, "maintain")
        assert code == 0 and report["days_compacted"] == 3
        assert verified() == before
        # A window lost from the old place (compacted) is found there, not at the new one.
        next((world.root / "bucket" / "email_events" / "date=2026-09-30").iterdir()).unlink()
        after = verified()
        assert after["B"] == before["B"]
        kinds = {p["kind"] for p in after["A"][1]["problems"]}
        assert after["A"][0] != 0 and kinds & {"ledger_window_missing", "ledger_rows_mismatch"}, kinds
