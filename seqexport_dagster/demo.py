"""The embedded demo: a day of generated data for two accounts, exported into local folders.

Everything lives under one demo folder (default ``.demo/``): the source and control-plane SQLite
files, a generated credential key, and one bucket folder per account. Rebuilt from scratch on each
run, so the demo is repeatable.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from seqexport_dagster.destination.base import DestinationConfig, OperatorPolicy
from seqexport_dagster.runner import Runner, wall_clock_ms
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.source.generator import Scale, generate_account
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store.crypto import SecretBox, local_key_spec
from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.store import ControlPlane, ExportRecord
from seqexport_dagster.window import HOUR_MS, MINUTE_MS, day_of

ACCOUNTS = ("acme", "globex")
DATA_HOURS = 26


@dataclass
class DemoExport:
    account_id: str
    export_id: str
    root: Path


@dataclass
class DemoSummary:
    home: Path
    exports: list[DemoExport] = field(default_factory=list)
    windows: int = 0
    files: int = 0
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    runs: int = 0
    source_rows: dict[str, dict[str, int]] = field(default_factory=dict)

    def duckdb_query(self, dataset: str = "email_events") -> str:
        root = self.exports[0].root
        return (
            f"SELECT event_type, COUNT(DISTINCT id) FROM read_json_auto('{root}/{dataset}/*/*.jsonl.gz', "
            "hive_partitioning = true) GROUP BY event_type ORDER BY 2 DESC;"
        )


@dataclass
class DemoWorld:
    home: Path
    store: ControlPlane
    source: SourceReader
    policy: OperatorPolicy
    exports: list[ExportRecord]
    roots: dict[str, Path]
    now_ms: int
    source_rows: dict[str, dict[str, int]]

    @property
    def control_url(self) -> str:
        return f"sqlite:///{self.home / 'control.db'}"

    @property
    def source_url(self) -> str:
        return f"sqlite:///{self.home / 'source.db'}"

    @property
    def secret_keys(self) -> str:
        return local_key_spec(self.home / "secret.key")


def build_demo(home: Path, dest_dir: Path | None = None, *, now_ms: int | None = None) -> DemoWorld:
    """Create the demo's source data, control plane and exports (one per account)."""
    home = home.resolve()
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    now = (now_ms if now_ms is not None else wall_clock_ms()) // MINUTE_MS * MINUTE_MS
    created = now - (DATA_HOURS - 1) * HOUR_MS
    source_engine = create_engine(f"sqlite:///{home / 'source.db'}")
    store = ControlPlane(
        create_engine(f"sqlite:///{home / 'control.db'}"), SecretBox.parse(local_key_spec(home / "secret.key"))
    )
    store.migrate()
    source_rows = {}
    for i, account in enumerate(ACCOUNTS):
        source_rows[account] = generate_account(
            source_engine, account, now - DATA_HOURS * HOUR_MS, now, seed=42 + i, scale=Scale(subscribers=400 - 100 * i)
        )
    roots: dict[str, Path] = {}
    exports = []
    for i, account in enumerate(ACCOUNTS):
        root = dest_dir.resolve() if dest_dir is not None and i == 0 else home / "buckets" / account
        roots[account] = root
        exports.append(
            store.create_export(
                account_id=account,
                destination=DestinationConfig("local", str(root)),
                datasets=list(DATASETS),
                frequency="1h",
                lag_ms=2 * MINUTE_MS,
                now_ms=created,
            )
        )
    return DemoWorld(
        home=home,
        store=store,
        source=SourceReader(source_engine),
        policy=OperatorPolicy(allow_local=True),
        exports=exports,
        roots=roots,
        now_ms=now,
        source_rows=source_rows,
    )


def run_demo_core(world: DemoWorld, progress: Callable[[str], None] = lambda _: None) -> DemoSummary:
    """Export every due window and the last complete day's snapshot through the core runners."""
    started = time.perf_counter()
    summary = DemoSummary(home=world.home, source_rows=world.source_rows)
    runner = Runner(world.store, world.source, world.policy, clock=lambda: world.now_ms)
    for export in world.exports:
        summary.exports.append(DemoExport(export.account_id, export.id, world.roots[export.account_id]))
        day = day_of(export.created_at)
        while day <= day_of(world.now_ms):
            for dataset in DATASETS:
                report = runner.run_day(export.id, dataset, day, run_id=f"demo-{export.account_id}-{day}")
                summary.windows += len(report.windows) + (1 if report.snapshot else 0)
                summary.files, summary.rows, summary.bytes = (
                    summary.files + report.files,
                    summary.rows + report.rows,
                    summary.bytes + report.bytes,
                )
                if report.rows or report.files:
                    progress(f"{export.account_id:7} {dataset:14} {day}  {report.rows:6} rows  {report.files:3} files")
            day = day.fromordinal(day.toordinal() + 1)
        summary.runs += 1
    summary.seconds = time.perf_counter() - started
    return summary


def run_demo(home: Path, dest_dir: Path | None = None, progress: Callable[[str], None] = lambda _: None) -> DemoSummary:
    world = build_demo(home, dest_dir)
    progress(f"demo data: {sum(sum(v.values()) for v in world.source_rows.values())} source rows in {world.home}")
    return run_demo_core(world, progress)
