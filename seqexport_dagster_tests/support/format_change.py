"""A real two-day export through the core runner with a format change in it, for the loading statements.

Day 1 (2026-09-30) is all gzip JSONL, snapshot included. On day 2 the events of 00:00-12:00 are JSONL,
then the export changes to Parquet: the events of 12:00-24:00 and day 2's snapshot are Parquet, so day 2's
event folders hold both kinds of part (the day of a format change). One subscriber is deleted upstream
between the two snapshots: a loader that shows the latest complete day no longer shows it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FileFormat
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.management.api import Exports
from seqexport_dagster_tests.support.parts import part_rows
from seqexport_dagster_tests.support.world import ALL_DATASETS, DAY0, World

ACCOUNT = "acme"
DAY1, DAY2 = Window(DAY0, DAY0 + DAY_MS).day, Window(DAY0 + DAY_MS, DAY0 + 2 * DAY_MS).day
SMALL = Scale(subscribers=60, email_sends_per_hour=20, sms_sends_per_hour=6, custom_per_hour=10)
LAG = 3 * 60_000


@dataclass(frozen=True)
class ChangeExport:
    root: Path
    export_id: str
    deleted_subscriber: str

    def parts(self, dataset: str) -> list[Path]:
        return sorted(p for p in (self.root / dataset).rglob("*") if p.is_file() and p.name != "_SUCCESS")

    def rows(self, dataset: str, suffix: str = "") -> list[dict[str, object]]:
        """Every row of the dataset's parts (ending in ``suffix``), decoded as the contract says."""
        return [r for p in self.parts(dataset) if p.name.endswith(suffix) for r in part_rows(p.name, p.read_bytes())]

    def ids(self, dataset: str, suffix: str = "", day: str | None = None) -> set[str]:
        return {
            str(r["id"])
            for p in self.parts(dataset)
            if p.name.endswith(suffix) and (day is None or f"date={day}" in p.as_posix())
            for r in part_rows(p.name, p.read_bytes())
        }


def write_change_export(
    world: World, *, first: FileFormat = "jsonl.gz", then: FileFormat = "parquet", datasets: tuple[str, ...] = ALL_DATASETS
) -> ChangeExport:
    """Two days: ``first`` until day 2 12:00, ``then`` after (day 2's snapshot included)."""
    generate_account(world.source_engine, ACCOUNT, DAY0 - HOUR_MS, DAY0 + 2 * DAY_MS, scale=SMALL)
    export = world.local_export(ACCOUNT, datasets=datasets, frequency="6h", lag_ms=120_000, file_format=first)
    events = tuple(d for d in datasets if d != "subscribers")
    _run_range(world, export.id, DAY0, DAY0 + DAY_MS + 12 * HOUR_MS, events)
    if "subscribers" in datasets:
        _snapshot(world, export.id, DAY1)
    Exports(world.store, world.policy, clock=world.clock).change_format(export.id, then)
    with world.source_engine.begin() as conn:
        deleted = conn.execute(
            sa.text("SELECT id FROM subscribers WHERE account_id = :a ORDER BY id LIMIT 1"), {"a": ACCOUNT}
        ).scalar_one()
        conn.execute(sa.text("DELETE FROM subscribers WHERE id = :i"), {"i": deleted})
    _run_range(world, export.id, DAY0 + DAY_MS + 12 * HOUR_MS, DAY0 + 2 * DAY_MS, events)
    if "subscribers" in datasets:
        _snapshot(world, export.id, DAY2)
    return ChangeExport(world.root / "bucket", export.id, deleted)


def _run_range(world: World, export_id: str, start_ms: int, until_ms: int, datasets: tuple[str, ...]) -> None:
    runner = world.runner(part_limit=40)
    for end in range(start_ms + 6 * HOUR_MS, until_ms + 1, 6 * HOUR_MS):
        world.clock.now_ms = end + LAG
        for dataset in datasets:
            runner.run_day(export_id, dataset, Window(end - 1, end).day)


def _snapshot(world: World, export_id: str, day: dt.date) -> None:
    """The snapshot of ``day``, taken once that day is over (as the scheduler does)."""
    world.runner(part_limit=40).run_day(export_id, "subscribers", day)
