"""Run `seqexport` in-process against a test world: same control plane, same clock, captured output."""

from __future__ import annotations

import io
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster import cli
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.tables import export_datasets, exports, parts, windows
from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database


class FakeStdin(io.StringIO):
    def __init__(self, text: str, tty: bool) -> None:
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Cli:
    world: World
    env: dict[str, str]
    key_spec: str
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    remote: bool = False
    calls: list[Result] = field(default_factory=list)

    def __call__(self, *argv: str, stdin: str = "", tty: bool = False, env: dict[str, str] | None = None) -> Result:
        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "stdin", FakeStdin(stdin, tty))
        code = cli.main(list(argv), env=self.env if env is None else env, clock=self.world.clock)
        captured = self.capsys.readouterr()
        result = Result(code, captured.out, captured.err)
        self.calls.append(result)
        return result

    def ok(self, *argv: str, **kwargs: Any) -> Any:
        """Run with --json, insist on exit 0, return the parsed output."""
        result = self(*argv, "--json", **kwargs)
        assert result.code == 0, (argv, result)
        return result.json

    def create_local(self, folder: str = "bucket", *extra: str, account: str = "acme") -> dict[str, Any]:
        root = self.world.root / folder
        return self.ok("create", "--account", account, "--provider", "local", "--bucket", str(root), *extra)


def control_plane_rows(engine: sa.Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Everything the control plane holds, to prove a refused command changed nothing."""
    with engine.connect() as conn:
        return {
            t.name: sorted(tuple(r) for r in conn.execute(sa.select(t)).all())
            for t in (exports, export_datasets, windows, parts)
        }


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@contextmanager
def cli_world(backend: str, root: Path) -> Any:
    spec = new_key_spec("t1")
    box = SecretBox.parse(spec)

    def build(control: str, source: str) -> World:
        return World(root, control, source, Clock(DAY0), box=box)

    if backend == "sqlite":
        world = build(f"sqlite:///{root / 'control.db'}", f"sqlite:///{root / 'source.db'}")
        try:
            yield world, spec
        finally:
            world.dispose()
        return
    with postgres_database() as control, postgres_database() as source:
        world = build(control, source)
        try:
            yield world, spec
        finally:
            world.dispose()


def env_for(world: World, spec: str, *, allow_local: bool = True) -> dict[str, str]:
    env = {
        "SEQEXPORT_DATABASE_URL": world.control_url,
        "SEQEXPORT_SOURCE_URL": world.source_url,
        "SEQEXPORT_SECRET_KEYS": spec,
        "SEQEXPORT_HOME": str(world.root / "home"),
    }
    if allow_local:
        env["SEQEXPORT_ALLOW_LOCAL"] = "1"
    return env


@contextmanager
def remote_env(world: World, spec: str) -> Any:
    """The HTTP API over the world's control plane (uvicorn in a thread, sharing the world's clock),
    and the environment that makes `seqexport` call it with an operator token."""
    from seqexport_dagster.destination.policy import OperatorPolicy
    from seqexport_dagster.management.api import Exports
    from seqexport_dagster_tests.support.api_server import mint, serve_thread

    exports = Exports(world.store, OperatorPolicy(allow_local=True), clock=world.clock)
    with serve_thread(exports) as server:
        yield {"SEQEXPORT_API_URL": server.url, "SEQEXPORT_API_TOKEN": mint(exports, None)}


@pytest.fixture(
    name="run",
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("remote", marks=pytest.mark.slow),
    ],
)
def run_fixture(request: pytest.FixtureRequest, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`seqexport` against a fresh control plane: on SQLite, on PostgreSQL, and through the HTTP API
    (``remote``: SEQEXPORT_API_URL + an operator token; the server's control plane is on SQLite)."""
    with cli_world("sqlite" if request.param == "remote" else request.param, tmp_path) as (world, spec):
        if request.param != "remote":
            yield Cli(world, env_for(world, spec), spec, capsys, monkeypatch)
            return
        with remote_env(world, spec) as env:
            yield Cli(world, env, spec, capsys, monkeypatch, remote=True)


@pytest.fixture(name="run_sqlite")
def run_sqlite_fixture(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`seqexport` on SQLite only, for behaviour that does not touch the database backend."""
    with cli_world("sqlite", tmp_path) as (world, spec):
        yield Cli(world, env_for(world, spec), spec, capsys, monkeypatch)
