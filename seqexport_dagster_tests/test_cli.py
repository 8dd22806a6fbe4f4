"""Every operation of "Manage exports" through `seqexport`, on SQLite and PostgreSQL control planes.

The CLI runs in-process (`cli.main`) against the same control plane and clock as a real `Runner`,
which writes the files; one test runs the installed entry point as a subprocess.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of, iso_ms
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.base import PutOutcome
from seqexport_dagster.errors import AccessDenied, RunInterrupted
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.cli_harness import (  # noqa: F401 - fixtures
    Cli,
    control_plane_rows,
    files_under,
    run_fixture,
    run_sqlite_fixture,
)
from seqexport_dagster_tests.support.moto_server import MotoServer, free_port
from seqexport_dagster_tests.support.world import DAY0, World

LAG = 2 * MINUTE_MS
SMALL = Scale(subscribers=40, email_sends_per_hour=12, sms_sends_per_hour=4, custom_per_hour=6)


def drive(world: World, export_id: str, run_id: str, **runner_kwargs: Any) -> None:
    """What the scheduler would do now: every due day of every dataset of the export."""
    runner = world.runner(**runner_kwargs)
    export = world.store.get_export(export_id)
    for state in export.datasets:
        day = day_of(
            min(state.position_ms, world.clock() - DAY_MS) if state.dataset == "subscribers" else state.position_ms
        )
        while day <= day_of(world.clock()):
            runner.run_day(export_id, state.dataset, day, run_id=run_id)
            day += dt.timedelta(days=1)


def committed(world: World, export_id: str, dataset: str) -> list[Any]:
    return sorted(w.window for w in world.store.ledger(export_id, dataset=dataset) if w.status == "committed")


def source_rows(world: World, table: str, after_ms: int, upto_ms: int) -> int:
    with world.source_engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    f"SELECT count(*) FROM {table} WHERE account_id = 'acme' AND recorded_at > :a AND recorded_at <= :b"
                ),
                {"a": iso_ms(after_ms), "b": iso_ms(upto_ms)},
            ).scalar_one()
        )


def aligned(text: str, header: str, column: str) -> bool:
    """Every line of a table has its ``column`` value starting where the header's column starts."""
    lines = text.strip().splitlines()
    start = lines[0].index(column)
    return lines[0].startswith(header) and all(line[start - 2 : start] == "  " for line in lines[1:])


def positions(export: dict[str, Any]) -> dict[str, int]:
    return {d["dataset"]: d["position_ms"] for d in export["datasets"]}


def test_every_operation(run: Cli) -> None:
    w = run.world
    generate_account(w.source_engine, "acme", DAY0 - DAY_MS, DAY0 + 2 * DAY_MS, seed=3, scale=SMALL)
    w.clock.now_ms = start = DAY0 + 30 * MINUTE_MS
    b1 = w.root / "b1"

    # create: the connection test file is the only thing written, outside every dataset folder.
    exp = run.create_local("b1", "--prefix", "sequenzy", "--datasets", "email_events,custom_events")
    eid = exp["id"]
    assert exp["status"] == "active" and exp["frequency"] == "1h" and exp["lag_ms"] == LAG
    assert positions(exp) == {"email_events": start, "custom_events": start}
    [test_file] = files_under(b1)
    assert test_file.startswith("sequenzy/_sequenzy/connection-test-") and test_file.endswith(".txt")
    assert "connection test" in (b1 / test_file).read_text()
    human = run(
        "create", "--account", "beta", "--provider", "local", "--bucket", str(w.root / "b9"), "--frequency", "15m"
    )
    assert human.code == 0 and "Created export exp_" in human.out and "connection test passed" in human.err

    # list: JSON for scripts, an aligned table for people.
    assert [e["id"] for e in run.ok("list", "--account", "acme")] == [eid]
    assert len(run.ok("list")) == 2
    table = run("list").out
    assert aligned(table, "EXPORT", "ACCOUNT") and aligned(table, "EXPORT", "DESTINATION") and eid in table

    # status: position and how far it trails real time.
    w.clock.now_ms = DAY0 + 3 * HOUR_MS + 5 * MINUTE_MS
    drive(w, eid, "run-1")
    status = run.ok("status", eid)
    email = next(d for d in status["datasets"] if d["dataset"] == "email_events")
    assert email["position_ms"] == DAY0 + 3 * HOUR_MS and email["behind_ms"] == 5 * MINUTE_MS
    assert email["position"] == iso_ms(DAY0 + 3 * HOUR_MS) and status["last_error"] is None
    text = run("status", eid).out
    assert aligned(text.split("\n\n")[1], "DATASET", "BEHIND") and "5m 00s" in text and "No errors." in text

    # pause keeps the position; a run stops before its first file.
    assert run.ok("pause", eid)["status"] == "paused"
    w.clock.advance(5 * HOUR_MS)
    with pytest.raises(RunInterrupted):
        w.runner().run_day(eid, "email_events", day_of(w.clock()))
    assert positions(run.ok("status", eid))["email_events"] == DAY0 + 3 * HOUR_MS
    assert run.ok("pause", eid)["status"] == "paused"  # pausing twice is harmless

    # resume catches up from the kept position with no gap.
    assert run.ok("resume", eid)["status"] == "active"
    drive(w, eid, "run-2")
    assert positions(run.ok("status", eid))["email_events"] == DAY0 + 8 * HOUR_MS
    chain = committed(w, eid, "email_events")
    assert chain[0].from_ms == start and chain[-1].to_ms == DAY0 + 8 * HOUR_MS
    assert all(a.to_ms == b.from_ms for a, b in zip(chain, chain[1:], strict=False))
    written = sum(x.rows for x in w.store.ledger(eid, dataset="email_events") if x.status == "committed")
    assert written == source_rows(w, "email_events", start, DAY0 + 8 * HOUR_MS) > 0

    # export now: a window ending at now - lag, not on the grid.
    w.clock.advance(20 * MINUTE_MS)
    asked = run.ok("export-now", eid)
    assert asked["export_now_requested_at"] == iso_ms(w.clock())
    drive(w, eid, "run-3")
    after = run.ok("status", eid)
    assert positions(after)["email_events"] == w.clock() - LAG and after["export_now_requested_at"] is None

    # datasets: an added dataset starts now; a re-added one starts anew from its re-add.
    added = run.ok("datasets", "add", eid, "sms_events")
    assert positions(added)["sms_events"] == w.clock()
    removed = run.ok("datasets", "remove", eid, "sms_events")
    assert "sms_events" not in positions(removed)
    w.clock.advance(HOUR_MS)
    assert positions(run.ok("datasets", "add", eid, "sms_events"))["sms_events"] == w.clock()
    said = run("datasets", "remove", eid, "sms_events").out
    assert said == f"Export {eid} no longer exports sms_events (files stay); datasets: email_events, custom_events.\n"

    # destination: test file at the new place first, then the runner continues there from its position.
    before_move = positions(run.ok("status", eid))["email_events"]
    b1_files = files_under(b1)
    moved = run.ok("destination", eid, "--bucket", str(w.root / "b2"))
    assert moved["destination_version"] == exp["destination_version"] + 1 and moved["prefix"] == "sequenzy"
    [moved_test] = files_under(w.root / "b2")
    assert moved_test.startswith("sequenzy/_sequenzy/connection-test-")
    w.clock.advance(2 * HOUR_MS)
    drive(w, eid, "run-4")
    new_parts = [f for f in files_under(w.root / "b2") if f.startswith("sequenzy/email_events/")]
    assert min(int(Path(f).name.split("-")[1]) for f in new_parts) == before_move
    assert files_under(b1) == b1_files  # nothing more went to the old place

    # history: every run with rows, files and size.
    history = run.ok("history", eid)
    assert {r["run_id"] for r in history} >= {"run-1", "run-2", "run-3", "run-4"}
    assert all({"rows", "files", "bytes", "error", "status", "started_at"} <= r.keys() for r in history)
    assert sum(r["rows"] for r in history) == sum(x.rows for x in w.store.ledger(eid) if x.status == "committed")
    assert aligned(run("history", eid).out, "STARTED (UTC)", "ROWS")

    # delete: stops the export, files stay, history stays readable.
    deleted = run.ok("delete", eid, "--yes")
    assert deleted["status"] == "deleted" and deleted["deleted_at"] == iso_ms(w.clock())
    with pytest.raises(RunInterrupted):
        w.runner().run_day(eid, "email_events", day_of(w.clock()))
    assert files_under(b1) == b1_files and len(files_under(w.root / "b2")) > 1
    assert run.ok("history", eid) == history
    assert run.ok("status", eid)["status"] == "deleted"
    assert eid not in [e["id"] for e in run.ok("list")]
    assert eid in [e["id"] for e in run.ok("list", "--all")]


class Refusing:
    """A destination that refuses every write the way a customer's bucket does."""

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        raise AccessDenied(f"access denied for s3:PutObject on acme-exports/{key}")

    def describe(self) -> str:
        return "s3://acme-exports"

    def close(self) -> None:
        return None


def test_status_shows_last_error_until_a_run_succeeds(run: Cli) -> None:
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=5, scale=SMALL)
    eid = run.create_local("b", "--datasets", "email_events")["id"]
    w.clock.advance(2 * HOUR_MS + LAG)
    refusing = w.runner(destination_factory=lambda config, policy: Refusing())
    for attempt in (1, 2):
        with pytest.raises(AccessDenied):
            refusing.run_day(eid, "email_events", day_of(w.clock()))
        err = run.ok("status", eid)["last_error"]
        assert err["dataset"] == "email_events" and err["attempts"] == attempt
        assert err["window"] == {"from_ms": DAY0, "to_ms": DAY0 + 2 * HOUR_MS}
        assert err["message"].startswith("access denied for s3:PutObject on acme-exports/")
        assert err["next_retry_at"] == iso_ms(w.clock() + HOUR_MS * attempt)  # backoff 1h, then 2h
    text = run("status", eid).out
    assert "last error of email_events" in text and "attempts    2" in text and "access denied" in text
    history = run.ok("history", eid)
    assert history[0]["status"] == "failed" and "access denied" in history[0]["error"]

    w.runner().run_day(eid, "email_events", day_of(w.clock()))
    status = run.ok("status", eid)
    assert status["last_error"] is None and status["datasets"][0]["last_error"] is None


def put_only_policy(bucket: str, prefix: str) -> str:
    statement = {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def make_user(iam: Any, name: str, policy: str) -> tuple[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=policy)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def test_connection_test_against_moto(run: Cli, iam_moto: MotoServer) -> None:
    iam = iam_moto.admin_client("iam")
    iam_moto.admin_client().create_bucket(Bucket="acme-exports")
    exporter = make_user(iam, "exporter", put_only_policy("acme-exports", "sequenzy"))
    elsewhere = make_user(iam, "elsewhere", put_only_policy("acme-exports", "other-team"))
    admin = make_user(
        iam,
        "admin",
        json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}),
    )
    iam_moto.enforce_auth()
    import boto3
    from botocore.config import Config

    reader = boto3.session.Session(aws_access_key_id=admin[0], aws_secret_access_key=admin[1]).client(
        "s3",
        endpoint_url=iam_moto.endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, proxies={}, retries={"total_max_attempts": 1}),
    )
    base = ("create", "--account", "acme", "--provider", "s3", "--bucket", "acme-exports", "--prefix", "sequenzy")
    at = ("--endpoint", iam_moto.endpoint)
    empty = control_plane_rows(run.world.control_engine)

    def refused(*argv: str, secret: str, expect: str) -> None:
        result = run(*argv, "--secret-stdin", stdin=secret + "\n")
        assert result.code == 5, result
        assert expect in result.err and "nothing was saved" in result.err, result.err
        assert secret not in result.out + result.err
        assert control_plane_rows(run.world.control_engine) == empty

    # A key without PutObject on this prefix: the store's answer, in the customer's words.
    refused(
        *base,
        *at,
        "--access-key-id",
        elsewhere[0],
        secret=elsewhere[1],
        expect="access denied for s3:PutObject on acme-exports/sequenzy/_sequenzy/connection-test-",
    )
    refused(*base, *at, "--access-key-id", exporter[0], secret="not-the-secret", expect="bad signature")
    refused(
        "create",
        "--account",
        "acme",
        "--provider",
        "s3",
        "--bucket",
        "no-such-bucket",
        *at,
        "--access-key-id",
        admin[0],
        secret=admin[1],
        expect="bucket no-such-bucket does not exist",
    )
    refused(
        *base,
        "--endpoint",
        f"http://127.0.0.1:{free_port()}",
        "--access-key-id",
        exporter[0],
        secret=exporter[1],
        expect="cannot reach",
    )
    assert reader.list_objects_v2(Bucket="acme-exports").get("KeyCount") == 0

    # A key with only PutObject on the prefix is enough.
    env = {**run.env, "EXPORTER_SECRET": exporter[1]}
    result = run(*base, *at, "--access-key-id", exporter[0], "--secret-env", "EXPORTER_SECRET", "--json", env=env)
    assert result.code == 0, result
    created = result.json
    assert created["access_key_id"] != exporter[0] and created["access_key_id"].endswith(exporter[0][-4:])
    assert "connection test passed" in result.err
    [key] = [o["Key"] for o in reader.list_objects_v2(Bucket="acme-exports")["Contents"]]
    assert key.startswith("sequenzy/_sequenzy/connection-test-")
    assert b"Sequenzy Data Exports connection test" in reader.get_object(Bucket="acme-exports", Key=key)["Body"].read()

    # Moving to a prefix the key may not write: refused, nothing changes; a permitted one is saved.
    before = control_plane_rows(run.world.control_engine)
    moved = run("destination", created["id"], "--prefix", "other-team", env=env)
    assert moved.code == 5 and "access denied for s3:PutObject on acme-exports/other-team/" in moved.err
    assert control_plane_rows(run.world.control_engine) == before
    ok = run("destination", created["id"], "--prefix", "sequenzy/v2", "--json", env=env)
    assert ok.code == 0 and ok.json["prefix"] == "sequenzy/v2"
    assert ok.json["destination_version"] == created["destination_version"] + 1
    # Rotating to a new key: the new secret is required and tested.
    rotated = run(
        "destination", created["id"], "--access-key-id", admin[0], "--secret-stdin", "--json", stdin=admin[1] + "\n"
    )
    assert rotated.code == 0 and rotated.json["access_key_id"].endswith(admin[0][-4:])
    config, _ = run.world.store.destination_config(created["id"])
    assert (config.access_key_id, config.secret_access_key) == admin


def test_rotate_keys_reseals_every_secret(run: Cli, moto: MotoServer) -> None:
    if run.remote:
        # The keys are the server's environment: remotely, rotate-keys is the operator endpoint.
        assert run.ok("rotate-keys") == {"resealed": 0, "failed": []}
        return
    moto.admin_client().create_bucket(Bucket="rotate-keys-test")
    created = run.ok(
        "create",
        "--account",
        "acme",
        "--bucket",
        "rotate-keys-test",
        "--endpoint",
        moto.endpoint,
        "--access-key-id",
        "AKIAROTATE0000000001",
        "--secret-stdin",
        stdin="rotate-secret\n",
    )
    new_spec = new_key_spec("t2")
    both = {**run.env, "SEQEXPORT_SECRET_KEYS": f"{new_spec},{run.key_spec}"}
    assert run.ok("rotate-keys", env=both) == {"resealed": 1, "failed": []}
    assert run.ok("rotate-keys", env=both) == {"resealed": 0, "failed": []}
    only_new = {**run.env, "SEQEXPORT_SECRET_KEYS": new_spec}
    # The old key is gone and the stored secret still opens: the move re-uses it for its test.
    moved = run("destination", created["id"], "--prefix", "after-rotation", "--json", env=only_new)
    assert moved.code == 0, moved
    old_only = run("destination", created["id"], "--prefix", "again", env=run.env)
    assert old_only.code == 6 and "not in SEQEXPORT_SECRET_KEYS" in old_only.err


def test_secret_from_prompt(run_sqlite: Cli, moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    moto.admin_client().create_bucket(Bucket="prompt-test")
    asked: list[str] = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or "typed-secret")
    result = run_sqlite(
        "create",
        "--account",
        "acme",
        "--bucket",
        "prompt-test",
        "--endpoint",
        moto.endpoint,
        "--access-key-id",
        "AKIAPROMPT0000000001",
        tty=True,
    )
    assert result.code == 0 and asked == ["Secret access key: "]
    eid = run_sqlite.ok("list")[0]["id"]
    assert run_sqlite.world.store.destination_config(eid)[0].secret_access_key == "typed-secret"
    # A bad bucket name is reported before anybody is asked for a secret.
    asked.clear()
    bad = run_sqlite(
        "create",
        "--account",
        "acme",
        "--bucket",
        "Bad_Bucket",
        "--endpoint",
        moto.endpoint,
        "--access-key-id",
        "AKIAPROMPT0000000001",
        tty=True,
    )
    assert bad.code == 2 and asked == [] and "bucket:" in bad.err


def test_installed_entry_point(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "seqexport"
    assert exe.exists(), "pip install -e . puts the seqexport entry point into the venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_")}
    env.update(SEQEXPORT_HOME=str(tmp_path / "home"), SEQEXPORT_ALLOW_LOCAL="1")

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *argv], env=env, capture_output=True, text=True, timeout=120, check=False)

    helped = call("--help")
    assert helped.returncode == 0 and "exit codes" in helped.stdout and "5  connection test failed" in helped.stdout
    created = call("--json", "create", "--account", "acme", "--provider", "local", "--bucket", str(tmp_path / "b"))
    assert created.returncode == 0, created.stderr
    eid = json.loads(created.stdout)["id"]
    missing = call("status", "exp_0000000000000000")
    assert missing.returncode == 3 and missing.stderr == "error: export 'exp_0000000000000000' not found\n"
    assert (tmp_path / "b" / "_sequenzy").is_dir() and eid.startswith("exp_")
    assert (tmp_path / "home" / "control.db").exists()


def test_verify_with_the_ledger(run: Cli) -> None:
    """`verify --ledger`: locally from the database, remotely from GET /v1/exports/{id}/ledger."""
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=7, scale=SMALL)
    eid = run.create_local("v", "--datasets", "email_events")["id"]
    w.clock.advance(6 * HOUR_MS + LAG)
    drive(w, eid, "run-v1")
    w.clock.advance(2 * HOUR_MS)
    drive(w, eid, "run-v2")  # a second window, so the bucket still has one when the last is lost
    root = w.root / "v"
    clean = run.ok("verify", str(root), "--ledger", eid)
    assert clean["ok"] and clean["ledger_checked"], clean
    # A lost last part: the window's manifest names it from the bucket alone; the ledger agrees.
    last = sorted((root / "email_events").rglob("*.jsonl.gz"))[-1]
    last.unlink()
    alone = run("verify", str(root), "--json")
    assert alone.code == 7 and {p["kind"] for p in alone.json["problems"]} == {"missing_part"}, alone.out
    found = run("verify", str(root), "--ledger", eid, "--json")
    kinds = {p["kind"] for p in found.json["problems"]}
    assert found.code == 7 and kinds == {"ledger_window_missing", "missing_part"}, found
    assert run("verify", str(root), "--ledger", "exp_0000000000000000").code == 3
