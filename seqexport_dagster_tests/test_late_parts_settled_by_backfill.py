"""Late parts whose attempt died before its manifest are listed by whichever attempt commits next.

Long run #11 seed 30001406: a window delivered at an old prefix got its late rows at the new one
(part 0001, with its manifest). A reconciliation's late part 0002 landed there and the run worker
died before the manifest and the commit. A backfill of the day then found nothing to send and
committed the window without a manifest listing 0002; committed after the dead attempt, the part
no longer counted as unsettled for reconciliation either, so the bucket alone showed it unlisted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster.contract.window import HOUR_MS, Window, day_of
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination import open_destination
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

LAG = 120_000
FIRST = Window(DAY0, DAY0 + HOUR_MS)
SCALE = Scale(subscribers=5, email_sends_per_hour=4, sms_sends_per_hour=0, custom_per_hour=0)


class WorkerDied(BaseException):
    """The run worker was killed: nothing of it writes anything after this."""


class DiesBeforeManifest:
    """The local destination, whose worker dies on the PUT of a manifest naming ``through``."""

    def __init__(self, inner: Any, through: str) -> None:
        self.inner, self.through = inner, through
        self.preconditions = inner.preconditions

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> Any:
        if "/_sequenzy/manifests/" in key and key.endswith(f"-through-{self.through}.json"):
            raise WorkerDied(key)
        return self.inner.put(key, body, create_only=create_only)

    def describe(self) -> str:
        return str(self.inner.describe())

    def close(self) -> None:
        self.inner.close()


def manifest(root: Path, through: str) -> dict[str, Any] | None:
    name = f"email_events-{FIRST.from_ms}-{FIRST.to_ms}-through-{through}.json"
    path = root / "bucket" / "new" / "_sequenzy" / "manifests" / "email_events" / "date=2026-09-30" / name
    return json.loads(path.read_bytes()) if path.exists() else None


def test_a_backfill_after_a_move_lists_the_late_part_a_dead_attempt_left(world: World, tmp_path: Path) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), prefix="old")
    runner = world.runner()
    world.clock.now_ms = FIRST.to_ms + LAG
    runner.run_day(export.id, "email_events", day_of(DAY0))  # 00:00-01:00 whole at the old prefix
    new = DestinationConfig("local", str(tmp_path / "bucket"), prefix="new")
    world.store.update_destination(export.id, new, world.clock())
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + LAG
    runner.run_day(export.id, "email_events", day_of(DAY0))
    insert_rows(world.source_engine, "email_events", late_rows(FIRST, 2, "one"))
    reconcile(runner, export.id)  # late part 0001 at the new prefix, with its manifest
    assert manifest(tmp_path, "0001") is not None

    insert_rows(world.source_engine, "email_events", late_rows(FIRST, 1, "two"))
    dying = world.runner(destination_factory=lambda c, p: DiesBeforeManifest(open_destination(c, p), "0002"))
    with pytest.raises(WorkerDied):
        reconcile(dying, export.id)  # part 0002 landed; no manifest, no commit
    assert manifest(tmp_path, "0002") is None

    report = runner.run_day(export.id, "email_events", day_of(DAY0), rewrite=True)  # a backfill of the day
    assert [w.window for w in report.windows] == [FIRST]
    listed = manifest(tmp_path, "0002")
    assert listed is not None, "the backfill committed the late part without a manifest listing it"
    assert [p["part"] for p in listed["parts"]] == [1, 2]
    # Settled: the next reconciliation has nothing left to do for the window.
    assert all(r.report is None for r in reconcile(runner, export.id) if r.window == FIRST)
