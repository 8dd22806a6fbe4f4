"""A small world for tests: control plane, source and runner on SQLite or PostgreSQL, with a settable clock."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FileFormat
from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.source.tables import create_source_tables
from seqexport_dagster.store import ControlPlane, ExportRecord
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.database import create_engine

PG_ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
#: 2026-09-30T00:00:00Z, the day of the customer docs' examples.
DAY0 = 20726 * DAY_MS
ALL_DATASETS = ("email_events", "sms_events", "custom_events", "subscribers")


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the local server; dropped afterwards."""
    name = f"seqexport_test_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        # A throwaway database needs no commit to survive a server crash: without waiting for the
        # WAL flush a commit takes a fifth of the time (every session on it, servers' included).
        conn.execute(sa.text(f'ALTER DATABASE "{name}" SET synchronous_commit TO off'))
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class Clock:
    now_ms: int

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class World:
    root: Path
    control_url: str
    source_url: str
    clock: Clock
    box: SecretBox = field(default_factory=lambda: SecretBox.parse(new_key_spec("t1")))
    part_limit: int = 50_000

    def __post_init__(self) -> None:
        self.control_engine = create_engine(self.control_url)
        self.source_engine = create_engine(self.source_url)
        self.store = ControlPlane(self.control_engine, self.box)
        self.store.migrate()
        create_source_tables(self.source_engine)
        self.source = SourceReader(self.source_engine)
        self.policy = OperatorPolicy(allow_local=True)

    @classmethod
    def in_files(cls, root: Path, now_ms: int, key_spec: str) -> World:
        """A world whose control plane and source are SQLite files under ``root``: what a separate
        process (the Dagster daemon, a run worker, the CLI) can open too."""
        return cls(
            root,
            f"sqlite:///{root / 'control.db'}",
            f"sqlite:///{root / 'source.db'}",
            Clock(now_ms),
            box=SecretBox.parse(key_spec),
        )

    def runner(self, **kwargs: object) -> Runner:
        kwargs.setdefault("part_limit", self.part_limit)
        return Runner(self.store, self.source, self.policy, clock=self.clock, **kwargs)  # type: ignore[arg-type]

    def local_export(
        self,
        account_id: str = "acme",
        *,
        datasets: tuple[str, ...] = ALL_DATASETS,
        frequency: str = "1h",
        lag_ms: int = 120_000,
        folder: str = "bucket",
        prefix: str = "",
        file_format: FileFormat = "jsonl.gz",
    ) -> ExportRecord:
        return self.store.create_export(
            account_id=account_id,
            destination=DestinationConfig("local", str(self.root / folder), prefix=prefix),
            datasets=datasets,
            frequency=frequency,
            lag_ms=lag_ms,
            now_ms=self.clock(),
            file_format=file_format,
        )

    def dispose(self) -> None:
        self.control_engine.dispose()
        self.source_engine.dispose()


@contextmanager
def sqlite_world(root: Path, now_ms: int = DAY0) -> Iterator[World]:
    world = World(root, f"sqlite:///{root / 'control.db'}", f"sqlite:///{root / 'source.db'}", Clock(now_ms))
    try:
        yield world
    finally:
        world.dispose()


@contextmanager
def postgres_world(root: Path, now_ms: int = DAY0) -> Iterator[World]:
    with postgres_database() as control, postgres_database() as source:
        world = World(root, control, source, Clock(now_ms))
        try:
            yield world
        finally:
            world.dispose()
