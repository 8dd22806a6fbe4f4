"""The embedded demo: a day of generated data for two accounts, exported into local folders.

Everything lives under one demo folder (default ``.demo/``): the source and control-plane SQLite
files, a generated credential key, and one bucket folder per account. Rebuilt from scratch on each
run, so the demo is repeatable.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import seqexport_dagster
from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, day_of
from seqexport_dagster.delivery.assembly import open_control_plane, open_source
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination import DestinationConfig, OperatorPolicy
from seqexport_dagster.progress import Advance, no_progress
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store import COMMITTED, ControlPlane, ExportRecord

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
    #: The demo's Dagster instance, when the demo ran through Dagster (``dg dev`` on it).
    dagster_home: Path | None = None

    def duckdb_query(self, dataset: str = "email_events") -> str:
        root = self.exports[0].root
        return (
            f"SELECT event_type, COUNT(DISTINCT id) FROM read_json_auto('{root}/{dataset}/*/*.jsonl.gz', "
            "hive_partitioning = true) GROUP BY event_type ORDER BY 2 DESC;"
        )

    @property
    def query_file(self) -> Path:
        """`duckdb_query`, saved in the demo's home so that the printed commands need no quoting."""
        return self.home / "query.sql"

    def duckdb_commands(self) -> list[str]:
        """How to run the query (issue 42: the demo printed it and never said how): from this
        Python, which has DuckDB when the test extra is installed, or in the DuckDB shell."""
        code = f"import duckdb, pathlib; duckdb.sql(pathlib.Path({str(self.query_file)!r}).read_text()).show()"
        return [
            f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}",
            f"duckdb < {shlex.quote(str(self.query_file))}",
        ]

    def duckdb_counts(self) -> list[tuple[Any, ...]] | None:
        """`duckdb_query` run over what the demo wrote, when DuckDB is installed (it is a test extra)."""
        try:
            import duckdb
        except ImportError:
            return None
        return duckdb.execute(self.duckdb_query()).fetchall()

    def browse_hint(self) -> str:
        """What to run to browse the runs: ``make dev`` when the demo is the checkout's own ``.demo``
        (what `make dev` opens), else the full `browse_command`."""
        checkout = Path(seqexport_dagster.__file__).resolve().parent.parent
        dagster_home = (self.dagster_home or self.home / "dagster_home").resolve()
        ours = self.home.resolve() == checkout / ".demo" and dagster_home == checkout / ".demo" / "dagster_home"
        if ours and (checkout / "Makefile").is_file():
            return f"make dev      # in {checkout}; then open http://127.0.0.1:3000"
        return self.browse_command()

    def browse_command(self) -> str:
        """`dg dev` on the demo's instance, with absolute paths only, so it works from any folder.

        The code location is the checkout's ``workspace.yaml`` (the one `make dev` and production load);
        an install without a checkout names the same entry point by module.
        """
        workspace = Path(seqexport_dagster.__file__).resolve().parent.parent / "workspace.yaml"
        target = (
            ["-w", str(workspace)] if workspace.is_file() else ["-m", "seqexport_dagster.definitions", "-a", "defs"]
        )
        env = {
            "SEQEXPORT_HOME": self.home.resolve(),
            "SEQEXPORT_ALLOW_LOCAL": "1",
            "DAGSTER_HOME": (self.dagster_home or self.home / "dagster_home").resolve(),
        }
        dg_dev = [str(Path(sys.executable).absolute().parent / "dg"), "dev", *target, "-h", "127.0.0.1", "-p", "3000"]
        return (
            " ".join(f"{name}={shlex.quote(str(value))}" for name, value in env.items())
            + " \\\n    "
            + shlex.join(dg_dev)
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
    def settings(self) -> Settings:
        return demo_settings(self.home)


def demo_settings(home: Path) -> Settings:
    """Everything in the demo folder: both SQLite files and a generated key; the local mode on."""
    return Settings(
        database_url=f"sqlite:///{home / 'control.db'}",
        source_url=f"sqlite:///{home / 'source.db'}",
        secret_keys="",
        home=home,
        allow_local=True,
        secret_key_file=home / "secret.key",
    )


def build_demo(
    home: Path, dest_dir: Path | None = None, *, now_ms: int | None = None, advance: Advance = no_progress
) -> DemoWorld:
    """Create the demo's source data, control plane and exports (one per account)."""
    home = home.resolve()
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    now = (now_ms if now_ms is not None else wall_clock_ms()) // MINUTE_MS * MINUTE_MS
    created = now - (DATA_HOURS - 1) * HOUR_MS
    settings = demo_settings(home)
    source = open_source(settings)
    store = open_control_plane(settings, migrate=True)
    source_rows = {}
    for i, account in enumerate(ACCOUNTS):
        advance("building demo data (accounts)", i, len(ACCOUNTS))
        source_rows[account] = generate_account(
            source.engine, account, now - DATA_HOURS * HOUR_MS, now, seed=42 + i, scale=Scale(subscribers=400 - 100 * i)
        )
    advance("building demo data (accounts)", len(ACCOUNTS), len(ACCOUNTS))
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
        source=source,
        policy=settings.policy,
        exports=exports,
        roots=roots,
        now_ms=now,
        source_rows=source_rows,
    )


#: The repository's instance settings (run queue, run monitoring, retries, telemetry): the one source.
INSTANCE_YAML: Final = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


def demo_storage(dagster_home: Path) -> dict[str, Any]:
    """SQLite storage spelled out, with one consolidated event log instead of a database per run:
    the demo's runs are small, and creating a database file per run costs more than the run itself
    on a slow-fsync disk."""
    return {
        "run_storage": {
            "module": "dagster.core.storage.runs",
            "class": "SqliteRunStorage",
            "config": {"base_dir": f"{dagster_home}/history"},
        },
        "event_log_storage": {
            "module": "dagster.core.storage.event_log",
            "class": "ConsolidatedSqliteEventLogStorage",
            "config": {"base_dir": f"{dagster_home}/history/runs"},
        },
        "schedule_storage": {
            "module": "dagster.core.storage.schedules",
            "class": "SqliteScheduleStorage",
            "config": {"base_dir": f"{dagster_home}/schedules"},
        },
    }


def demo_instance_yaml(dagster_home: Path, instance_yaml: Path = INSTANCE_YAML) -> str:
    """The demo instance: ``dagster.yaml`` with its storage spelled out (`demo_storage`).

    Everything but the storage is read from ``dagster.yaml``, so the demo's run queue and limits are
    the repository's. Outside a checkout (no ``dagster.yaml`` next to the package) Dagster's defaults
    apply to them.
    """
    import yaml  # PyYAML comes with dagster

    settings: dict[str, Any] = yaml.safe_load(instance_yaml.read_text()) if instance_yaml.is_file() else {}
    settings.pop("storage", None)
    header = (
        "# Written by `seqexport demo`. Browse with `make dev` (or the `dg dev` command `seqexport demo` prints).\n"
    )
    body: str = yaml.safe_dump({**demo_storage(dagster_home), **settings}, sort_keys=False)
    return header + body


def run_demo_dagster(
    world: DemoWorld,
    progress: Callable[[str], None] = lambda _: None,
    *,
    max_ticks: int = 10,
    advance: Advance = no_progress,
) -> DemoSummary:
    """Export through Dagster: real sensor ticks and real runs on a real instance.

    The instance lives in ``<home>/dagster_home``; ``dagster dev`` on that folder afterwards shows
    the runs, the window observations, the materialized (export, day) cells and the partitions.
    The sensor is evaluated and its runs executed in this process (what the daemon and the run
    launcher do), with the clock pinned to the demo's "now".
    """
    import dagster as dg

    from seqexport_dagster.definitions import build_definitions, exporter_resources
    from seqexport_dagster.defs.resources import (
        ControlPlaneResource,
        FixedClock,
        OperatorResource,
        SourceResource,
    )
    from seqexport_dagster.demo.ticker import tick

    started = time.perf_counter()
    dagster_home = world.home / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text(demo_instance_yaml(dagster_home))
    summary = DemoSummary(home=world.home, source_rows=world.source_rows, dagster_home=dagster_home)
    summary.exports = [DemoExport(e.account_id, e.id, world.roots[e.account_id]) for e in world.exports]
    settings = world.settings
    resources = exporter_resources(
        # The key travels as a file path: Dagster may store resource values, never the key itself.
        ControlPlaneResource(database_url=settings.database_url, secret_key_file=str(settings.secret_key_file)),
        SourceResource(source_url=settings.source_url),
        OperatorResource(allow_local="1"),
        FixedClock(at_ms=world.now_ms),
    )
    first = min(day_of(s.added_at) for e in world.exports for s in e.datasets)
    defs = build_definitions(resources, first_day=first)
    cursor = None
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        for _ in range(max_ticks):
            advance("catching up through Dagster (runs)", summary.runs, None)
            outcome = tick(instance, defs, console_log_level="WARNING", cursor=cursor)
            cursor = outcome.cursor
            if not outcome.requested:
                break
            # The delivery runs (status runs and the runs recording completed days are not listed).
            for result in outcome.results:
                run = result.dagster_run
                datasets = ", ".join(sorted(k.path[-1] for k in run.asset_selection or []))
                status = "ok" if result.success else "FAILED"
                exports = run.tags.get("seqexport/exports", "?")
                day = run.tags.get("dagster/partition", "?")
                progress(f"run {result.run_id[:8]} {day}  {exports} export(s)  {datasets}: {status}")
            summary.runs += len(outcome.results)
            advance("catching up through Dagster (runs)", summary.runs, None)
    for export in world.exports:
        for w in world.store.ledger(export.id):
            if w.status == COMMITTED:
                summary.windows += 1
                summary.rows += w.rows
                summary.files += w.parts + (1 if w.snapshot_taken_at is not None else 0)
                summary.bytes += w.bytes
    summary.seconds = time.perf_counter() - started
    summary.query_file.write_text(summary.duckdb_query() + "\n")
    return summary


def run_demo(
    home: Path,
    dest_dir: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
    advance: Advance = no_progress,
) -> DemoSummary:
    world = build_demo(home, dest_dir, advance=advance)
    progress(f"demo data: {sum(sum(v.values()) for v in world.source_rows.values())} source rows in {world.home}")
    return run_demo_dagster(world, progress, advance=advance)
