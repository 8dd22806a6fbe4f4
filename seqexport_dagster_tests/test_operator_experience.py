"""Issue 17 through the `seqexport` command: no silent no-ops, the frequency operation, and the nits.

Every test drives the real CLI (`cli.main`) against a real control plane (SQLite, and PostgreSQL
where the backend matters) and a real `Runner` writing real files.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, day_of, iso_ms
from seqexport_dagster.demo.generator import Scale, generate_account, subscribers
from seqexport_dagster.management.api import Exports
from seqexport_dagster_tests.support.cli_harness import (  # noqa: F401 - fixtures
    Cli,
    control_plane_rows,
    files_under,
    run_fixture,
    run_sqlite_fixture,
)
from seqexport_dagster_tests.support.world import DAY0, World, postgres_database

LAG = 2 * MINUTE_MS
SMALL = Scale(subscribers=30, email_sends_per_hour=20, sms_sends_per_hour=4, custom_per_hour=6)


def drive(world: World, export_id: str, run_id: str) -> None:
    """What the scheduler does now: every due day of every event dataset of the export."""
    runner = world.runner()
    for state in world.store.get_export(export_id).datasets:
        day = day_of(state.position_ms)
        while day <= day_of(world.clock()):
            runner.run_day(export_id, state.dataset, day, run_id=run_id)
            day += dt.timedelta(days=1)


def committed(world: World, export_id: str, dataset: str) -> list[Window]:
    return sorted(w.window for w in world.store.ledger(export_id, dataset=dataset) if w.status == "committed")


# --- 4. a mistyped SEQEXPORT_HOME or database URL never makes a new, empty control plane -----------


def test_missing_control_plane_is_refused_and_init_creates_it(run_sqlite: Cli, tmp_path: Path) -> None:
    run = run_sqlite
    typo_home = tmp_path / "seqexprot"
    env = {"SEQEXPORT_HOME": str(typo_home), "SEQEXPORT_SECRET_KEYS": run.key_spec}
    for argv in (("list",), ("status", "exp_0123456789abcdef"), ("rotate-keys",), ("frequency", "exp_01", "1h")):
        result = run(*argv, env=env)
        assert result.code == 6, (argv, result)
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
        assert f"no control plane at sqlite:///{typo_home / 'control.db'}" in result.err
        assert (
            "check SEQEXPORT_HOME (SEQEXPORT_DATABASE_URL is not set)" in result.err and "seqexport init" in result.err
        )
    assert not typo_home.exists()  # nothing was created, not even the folder
    as_json = run("list", "--json", env=env).json["error"]
    assert as_json["exit_code"] == 6 and "no control plane at" in as_json["message"]

    # A mistyped SEQEXPORT_DATABASE_URL is named as the variable to fix.
    url = f"sqlite:///{tmp_path / 'contrl.db'}"
    result = run("list", env={**env, "SEQEXPORT_DATABASE_URL": url})
    assert result.code == 6 and f"no control plane at {url}: check SEQEXPORT_DATABASE_URL" in result.err
    assert not (tmp_path / "contrl.db").exists()

    # verify --ledger is a management read too.
    (tmp_path / "empty").mkdir()
    result = run("verify", str(tmp_path / "empty"), "--ledger", "exp_0123456789abcdef", env=env)
    assert result.code == 6 and "no control plane at" in result.err

    # `init` creates and migrates it; then the same command works; `init` again says so.
    created = run("init", env=env)
    assert created.code == 0 and created.out == f"Created the control plane at sqlite:///{typo_home / 'control.db'}.\n"
    assert run("list", env=env).out.startswith("No exports.")
    again = run("init", "--json", env=env)
    assert again.code == 0 and again.json["created"] is False

    # `create` still creates one on first use (the README's first step).
    fresh = tmp_path / "fresh"
    env_fresh = {"SEQEXPORT_HOME": str(fresh), "SEQEXPORT_SECRET_KEYS": run.key_spec, "SEQEXPORT_ALLOW_LOCAL": "1"}
    made = run("create", "--account", "acme", "--provider", "local", "--bucket", str(tmp_path / "b"), env=env_fresh)
    assert made.code == 0, made
    assert run("list", env=env_fresh).code == 0


@pytest.mark.postgres
def test_missing_control_plane_on_postgres_and_postgres_urls(run_sqlite: Cli) -> None:
    run = run_sqlite
    with postgres_database() as url:
        # An empty database (no tables) is refused with the URL, never its password.
        with_password = url.replace("postgres@", "postgres:hunter2@")
        env = {"SEQEXPORT_DATABASE_URL": with_password, "SEQEXPORT_SECRET_KEYS": run.key_spec}
        result = run("list", env=env)
        assert result.code == 6 and "no control plane at postgresql+psycopg2://postgres:***@" in result.err
        assert "hunter2" not in result.err
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert not sa.inspect(conn).has_table("exports")
        # `postgres://` (how Heroku, Render and most PaaS write it) is accepted.
        paas = {**env, "SEQEXPORT_DATABASE_URL": url.replace("postgresql+psycopg2://", "postgres://")}
        assert run("init", env=paas).code == 0
        assert run("list", env=paas).out.startswith("No exports.")
        plain = {**env, "SEQEXPORT_DATABASE_URL": url.replace("postgresql+psycopg2://", "postgresql://")}
        assert run("list", env=plain).code == 0
        with engine.connect() as conn:
            assert sa.inspect(conn).has_table("exports")
        engine.dispose()
    # A database that does not exist: exit 6, the variable named.
    gone = run("list", env={**env, "SEQEXPORT_DATABASE_URL": url})
    assert gone.code == 6 and "check SEQEXPORT_DATABASE_URL" in gone.err


# --- 6. the export frequency can be changed, and the chain stays gap-free --------------------------


def test_frequency_change_keeps_the_chain_gap_free(run: Cli) -> None:
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=11, scale=SMALL)
    w.clock.now_ms = DAY0 + 13 * HOUR_MS
    eid = run.create_local("b", "--datasets", "email_events", "--frequency", "15m")["id"]
    w.clock.now_ms = DAY0 + 13 * HOUR_MS + 18 * MINUTE_MS
    drive(w, eid, "run-15m")
    assert committed(w, eid, "email_events") == [Window(DAY0 + 13 * HOUR_MS, DAY0 + 13 * HOUR_MS + 15 * MINUTE_MS)]

    said = run("frequency", eid, "1h")
    assert said.code == 0 and said.out.startswith(f"Export {eid} now runs every 1h;")
    assert run.ok("status", eid)["frequency"] == "1h"
    # Not due before the next point of the new grid (14:00) plus the lag.
    w.clock.now_ms = DAY0 + 14 * HOUR_MS + 1 * MINUTE_MS
    drive(w, eid, "run-too-early")
    assert len(committed(w, eid, "email_events")) == 1
    w.clock.now_ms = DAY0 + 15 * HOUR_MS + 3 * MINUTE_MS
    drive(w, eid, "run-1h")
    t = DAY0 + 13 * HOUR_MS
    windows = committed(w, eid, "email_events")
    # (13:15, 15:00] is one catch-up window; from there whole hours on the new grid.
    assert windows[0] == Window(t, t + 15 * MINUTE_MS) and windows[1].from_ms == t + 15 * MINUTE_MS
    assert windows[-1].to_ms == DAY0 + 15 * HOUR_MS
    assert all(a.to_ms == b.from_ms for a, b in zip(windows, windows[1:], strict=False))

    # The Python API does the same; back to 15m: the next window ends on the 15-minute grid.
    api = Exports(w.store, w.policy, clock=w.clock)
    assert api.change_frequency(eid, "15m").frequency == "15m"
    w.clock.now_ms = DAY0 + 15 * HOUR_MS + 17 * MINUTE_MS
    drive(w, eid, "run-15m-again")
    assert committed(w, eid, "email_events")[-1] == Window(DAY0 + 15 * HOUR_MS, DAY0 + 15 * HOUR_MS + 15 * MINUTE_MS)

    # Rows: every source row of the chain exactly once.
    rows = sum(x.rows for x in w.store.ledger(eid, dataset="email_events") if x.status == "committed")
    with w.source_engine.connect() as conn:
        expected = conn.execute(
            sa.text("SELECT count(*) FROM email_events WHERE recorded_at > :a AND recorded_at <= :b"),
            {"a": iso_ms(t), "b": iso_ms(DAY0 + 15 * HOUR_MS + 15 * MINUTE_MS)},
        ).scalar_one()
    assert rows == expected > 0

    bad = run("frequency", eid, "2h", "--json")
    assert bad.code == 2 and bad.json["error"]["field"] == "frequency"
    assert "'2h' is not one of 15m, 1h, 6h, 24h" in bad.json["error"]["message"]
    run.ok("delete", eid, "--yes")
    assert run("frequency", eid, "1h").code == 4


# --- 3. export-now starts work or says exactly why not and when -----------------------------------


def test_export_now_says_why_not_and_when(run_sqlite: Cli, tmp_path: Path) -> None:
    run = run_sqlite
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=5, scale=SMALL)
    created_at = w.clock.now_ms = DAY0 + 10 * HOUR_MS + 30 * MINUTE_MS
    eid = run.create_local("b", "--datasets", "email_events,subscribers")["id"]
    w.clock.advance(MINUTE_MS)  # within the lag

    refused = run("export-now", eid)
    assert refused.code == 4 and refused.out == ""
    assert f"export {eid} has nothing to export yet: it trails real time by its lag (2 min)" in refused.err
    assert f"export now can write from {iso_ms(created_at + LAG + 1)}" in refused.err
    # Brand new: nothing is exported yet, so it must not claim that everything is (issue 25).
    assert "already exported" not in refused.err
    assert f"it exports what is recorded from its creation ({iso_ms(created_at)}) on" in refused.err
    nxt = Window(created_at, DAY0 + 11 * HOUR_MS)
    assert f"the next scheduled window {nxt} is written at {iso_ms(nxt.to_ms + LAG)}" in refused.err
    assert w.store.get_export(eid).export_now_at is None  # a request that would do nothing is not saved

    # Past the lag: it starts, says what it writes, and warns that no daemon can be checked.
    w.clock.advance(10 * MINUTE_MS)
    started = run("export-now", eid)
    assert started.code == 0, started
    assert "the scheduler starts it at its next tick" in started.out
    assert f"email_events   from {Window(created_at, w.clock() - LAG)}" in started.out
    assert "subscribers" not in started.out  # its day is not over: nothing to write for it
    assert "warning: DAGSTER_HOME is not set" in started.err
    assert "`dagster-daemon run` or `dg dev`" in started.err and "dagster dev" not in started.err
    drive(w, eid, "run-now")
    assert committed(w, eid, "email_events") == [Window(created_at, w.clock() - LAG)]
    caught_up = run("export-now", eid)
    assert caught_up.code == 4 and f"up to now − lag ({iso_ms(w.clock() - LAG)}) is already exported" in caught_up.err

    # A Dagster instance whose daemon never ran, then one whose sensor daemon beat just now.
    from dagster import DagsterInstance
    from dagster._daemon.types import DaemonHeartbeat

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    w.clock.advance(10 * MINUTE_MS)
    env = {**run.env, "DAGSTER_HOME": str(home)}
    silent = run("export-now", eid, "--json", env=env)
    assert silent.code == 0 and "no Dagster daemon heartbeat" in silent.json["daemon_warning"]
    assert f"warning: no Dagster daemon heartbeat in DAGSTER_HOME={home} (never)" in silent.err
    assert "(or `dg dev`)" in silent.err
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_daemon_heartbeat(DaemonHeartbeat(time.time(), "SENSOR", "test-daemon"))
    w.clock.advance(10 * MINUTE_MS)
    beating = run("export-now", eid, "--json", env=env)
    assert beating.code == 0 and beating.json["daemon_warning"] is None and beating.err == ""
    assert beating.json["export_now"][0]["dataset"] == "email_events"

    run.ok("pause", eid)
    paused = run("export-now", eid)
    assert paused.code == 4 and f"export {eid} is paused, so export now would run nothing" in paused.err
    assert f"`seqexport resume {eid}`" in paused.err


# --- 7. the nits ----------------------------------------------------------------------------------


def test_duplicate_datasets_are_refused(run: Cli) -> None:
    eid = run.create_local("b", "--datasets", "email_events,sms_events,custom_events")["id"]
    before = control_plane_rows(run.world.control_engine)
    for argv in (
        ("datasets", "remove", eid, "sms_events,sms_events"),
        ("datasets", "add", eid, "subscribers,subscribers"),
        ("create", "--account", "acme", "--provider", "local", "--bucket", "x", "--datasets", "sms_events,sms_events"),
    ):
        result = run(*argv, "--json")
        assert result.code == 2, (argv, result)
        assert result.json["error"]["field"] == "datasets"
        assert "named more than once; name each dataset once" in result.json["error"]["message"]
    assert control_plane_rows(run.world.control_engine) == before


def test_provider_error_never_offers_local(run_sqlite: Cli) -> None:
    run = run_sqlite
    assert run.env["SEQEXPORT_ALLOW_LOCAL"] == "1"
    for env in (run.env, {k: v for k, v in run.env.items() if k != "SEQEXPORT_ALLOW_LOCAL"}):
        result = run("create", "--account", "acme", "--provider", "ftp", "--bucket", "b", "--json", env=env)
        message = result.json["error"]["message"]
        assert result.code == 2 and "'ftp' is not one of s3, gcs, azure (for R2" in message and "local" not in message


def test_status_of_a_deleted_export_shows_no_behind(run_sqlite: Cli) -> None:
    """A deleted export trails nothing any more: no delay that keeps growing (issue 25)."""
    run = run_sqlite
    w = run.world
    eid = run.create_local("b", "--datasets", "email_events")["id"]
    w.clock.advance(3 * HOUR_MS)
    run.ok("delete", eid, "--yes")
    assert run.ok("status", eid)["datasets"][0]["behind_ms"] is None
    w.clock.advance(5 * DAY_MS)
    assert run.ok("status", eid)["datasets"][0]["behind_ms"] is None
    assert "3h 00m" not in run("status", eid).out


def test_delete_asks_for_confirmation(run_sqlite: Cli) -> None:
    run = run_sqlite
    eid = run.create_local("b")["id"]
    script = run("delete", eid)
    assert script.code == 2 and "needs confirmation: pass --yes (scripts) or run it in a terminal" in script.err
    wrong = run("delete", eid, stdin="exp_nope\n", tty=True)
    assert wrong.code == 2 and "not confirmed: nothing was deleted" in wrong.err
    assert run.ok("status", eid)["status"] == "active"
    confirmed = run("delete", eid, stdin=eid + "\n", tty=True)
    assert confirmed.code == 0 and f"Delete export {eid} of acme" in confirmed.err
    assert run.ok("status", eid)["status"] == "deleted"


def test_warehouse_command_line(tmp_path: Path) -> None:
    def warehouse(*argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "seqexport_dagster.contract.warehouse", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)

    typo = warehouse("duckdb", "emial_events")
    assert typo.returncode == 2 and typo.stdout == ""
    assert (
        typo.stderr.startswith("error: dataset 'emial_events' is not one of email_events,")
        and typo.stderr.count("\n") == 1
    )
    assert "warehouse 'snowflak' is not one of" in warehouse("snowflak", "email_events").stderr
    assert "unrecognized arguments: --buckt" in warehouse("duckdb", "email_events", "--buckt", "b").stderr
    ok = warehouse("duckdb", "sms_events", "--bucket", "globex-data", "--prefix", "exports/seq")
    assert ok.returncode == 0 and "read_json('s3://globex-data/exports/seq/sms_events/*/*.jsonl.gz'" in ok.stdout
    bq = warehouse("bigquery", "email_events", "--bucket", "globex-data", "--prefix", "")
    assert "uris = ['gs://globex-data/email_events/*.jsonl.gz']" in bq.stdout
    sf = warehouse("snowflake", "email_events", "--bucket", "x", "--stage", "my_stage")
    assert sf.returncode == 0 and "CREATE STAGE IF NOT EXISTS my_stage\n  URL = 's3://x/sequenzy/'" in sf.stdout
    assert "@my_stage/email_events/" in sf.stdout
    assert "--stage applies to snowflake only" in warehouse("duckdb", "email_events", "--stage", "s").stderr


def test_generated_subscribers_never_change_in_the_future() -> None:
    import random

    start = DAY0
    rows = subscribers(random.Random(3), "acme", 3000, start)
    updated = [r[10] for r in rows]
    assert max(updated) < iso_ms(start)
    assert any(r[6] == "unsubscribed" for r in rows)
    assert all(r[11] is None or r[9] <= r[11] <= r[10] for r in rows)


def snapshot_rows(root: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for part in sorted(root.glob("subscribers/date=*/subscribers-*.jsonl.gz")):
        day = part.parent.name.removeprefix("date=")
        out += [(day, json.loads(line)) for line in gzip.decompress(part.read_bytes()).splitlines()]
    return out


def test_demo_snapshot_holds_no_future_updated_at(tmp_path: Path) -> None:
    from seqexport_dagster.demo.run import build_demo, run_demo_dagster

    world = build_demo(tmp_path / "demo", tmp_path / "dest", now_ms=DAY0 + 5 * HOUR_MS)
    try:
        run_demo_dagster(world)
    finally:
        world.store.engine.dispose()
    rows = snapshot_rows(tmp_path / "dest")
    assert rows
    for day, row in rows:
        end_of_day = iso_ms(int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp()) * 1000 + DAY_MS)
        assert row["updated_at"] < end_of_day, (day, row)
    assert files_under(tmp_path / "dest")


# --- 1. verify --ledger has no false alarm after a prefix move -------------------------------------


def test_verify_ledger_after_a_prefix_move(run_sqlite: Cli) -> None:
    run = run_sqlite
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=9, scale=SMALL)
    eid = run.create_local("b", "--datasets", "email_events", "--prefix", "old")["id"]
    w.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    drive(w, eid, "run-old")
    assert run.ok("destination", eid, "--prefix", "new")["prefix"] == "new"
    w.clock.now_ms = DAY0 + 4 * HOUR_MS + 3 * MINUTE_MS
    drive(w, eid, "run-new")
    assert len(committed(w, eid, "email_events")) == 2
    for prefix in ("old", "new"):
        report = run.ok("verify", str(w.root / "b" / prefix), "--ledger", eid)
        assert report["ok"] and report["ledger_checked"] and report["problems"] == [], (prefix, report)
