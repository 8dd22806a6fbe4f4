"""The remote CLI and ``--help`` load only what they use (issue 40): no SQLAlchemy, no control plane.

With ``SEQEXPORT_API_URL`` the CLI talks to the HTTP API and never opens a database, so importing
SQLAlchemy, Alembic, the control plane, the settings or the database-backed `api.Exports` (about
2 s under load) is pure waiting. Each command runs as a customer runs it, in a process of its own
(`support.cli_imports`), against the real app on uvicorn, and what that process had in `sys.modules`
as it exited is checked. Time itself is measured by
``benchmarks/remote_cli.py``, not asserted here: a busy core must not fail a test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.api_server import mint, serve_thread
from seqexport_dagster_tests.support.cli_imports import ImportedRun, run_importing
from seqexport_dagster_tests.support.world import World

#: What the remote mode never needs: the database and its schema, the control plane and what opens
#: it, the Dagster wiring, the engine's Parquet, the HTTP service's server side, and httpx (the
#: client is `http.client`: httpx brought httpcore and its own CLI's rich and click).
NEVER_REMOTE = (
    "httpx",
    "httpcore",
    "rich",
    "sqlalchemy",
    "alembic",
    "psycopg2",
    "seqexport_dagster.store.control_plane",
    "seqexport_dagster.store.database",
    "seqexport_dagster.store.crypto",
    "seqexport_dagster.delivery.settings",
    "seqexport_dagster.delivery.assembly",
    "seqexport_dagster.management.api",
    "dagster",
    "pyarrow",
    "fastapi",
    "uvicorn",
)
#: What ``--help`` never needs besides: any HTTP client and the bucket clients.
NEVER_HELP = (*NEVER_REMOTE, "http.client", "boto3", "botocore", "seqexport_dagster.management.remote")


@pytest.fixture(name="remote")
def remote_fixture(world: World) -> Iterator[dict[str, Any]]:
    """The HTTP API over the world's control plane, an export and a webhook in it, and the
    environment that points `seqexport` at it with an operator token."""
    exports = Exports(world.store, OperatorPolicy(allow_local=True), clock=world.clock)
    record = world.local_export("acme")
    hook = exports.webhooks().add(account_id="acme", url="http://127.0.0.1:9/seqexport")
    with serve_thread(exports) as server:
        env = {"SEQEXPORT_API_URL": server.url, "SEQEXPORT_API_TOKEN": mint(exports, None)}
        yield {"env": env, "export": record.id, "webhook": hook.endpoint.id, "bucket": str(world.root / "bucket")}


def ran(argv: list[str], env: dict[str, str], folder: Path, code: int = 0) -> ImportedRun:
    run = run_importing(argv, env, folder)
    assert run.code == code, (argv, run.out, run.err)
    return run


def create(bucket: str) -> list[str]:
    return ["create", "--account", "acme", "--provider", "local", "--bucket", bucket, "--datasets", "all"]


def test_remote_commands_never_load_the_database_or_the_control_plane(remote: dict[str, Any], tmp_path: Path) -> None:
    """Reads, changes (the table among them), webhooks and creates (each sends a secret-less local
    destination; one keeps a table): each answered by the server, none loading anything of `NEVER_REMOTE`."""
    env, export = remote["env"], remote["export"]
    commands = [
        ["list"],
        ["status", export],
        ["history", export],
        ["frequency", export, "15m"],
        ["table", export, "none"],
        ["webhooks", "list"],
        ["webhooks", "deliveries", remote["webhook"]],
        create(remote["bucket"] + "2"),
        [*create(remote["bucket"] + "3"), "--format", "parquet", "--table", "delta"],
        ["rotate-keys"],
    ]
    for argv in commands:
        run = ran([*argv, "--json"], env, tmp_path)
        json.loads(run.out)  # the server's answer reached the CLI
        assert "seqexport_dagster.management.remote" in run.modules, argv
        assert run.loaded(*NEVER_REMOTE) == [], argv
    # verify reads the bucket itself (its readers are its own), and the ledger from the API: exit 7,
    # the empty bucket holds none of the ledger's windows.
    Path(remote["bucket"]).mkdir(exist_ok=True)
    run = ran(["verify", remote["bucket"], "--ledger", export, "--json"], env, tmp_path, code=7)
    assert json.loads(run.out)["ok"] is False
    assert run.loaded(*NEVER_REMOTE) == []


def test_help_loads_neither_the_database_nor_the_http_client(tmp_path: Path) -> None:
    for argv in (["--help"], ["create", "--help"], ["webhooks", "add", "--help"]):
        run = ran(argv, {}, tmp_path)
        assert "usage: seqexport" in run.out, argv
        assert run.loaded(*NEVER_HELP) == [], argv


def test_the_check_sees_what_the_local_mode_loads(remote: dict[str, Any], world: World, tmp_path: Path) -> None:
    """The same check on the local mode, which does open the database, finds SQLAlchemy and the
    control plane: an empty answer above means the remote path left them out, not a blind check."""
    env = {"SEQEXPORT_DATABASE_URL": world.control_url, "SEQEXPORT_SECRET_KEYS": new_key_spec("t1")}
    run = ran(["list", "--json"], env, tmp_path)
    assert [e["id"] for e in json.loads(run.out)] == [remote["export"]]
    assert {"sqlalchemy", "seqexport_dagster.store.control_plane", "seqexport_dagster.management.api"} <= run.modules
