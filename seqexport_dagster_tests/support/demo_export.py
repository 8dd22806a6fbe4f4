"""One whole day of every dataset of the demo account, exported by the core runner into a local folder."""

from __future__ import annotations

from pathlib import Path

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster_tests.support.world import DAY0, World

ACCOUNT = "acme"
DAY = Window(DAY0, DAY0 + DAY_MS).day


def write_demo_export(world: World, *, part_limit: int = 50, scale: Scale | None = None) -> tuple[Path, str]:
    """One whole day of every dataset, exported by the core runner into a local folder."""
    counts = generate_account(world.source_engine, ACCOUNT, DAY0 - HOUR_MS, DAY0 + DAY_MS, scale=scale)
    assert counts["email_events"] > 0
    export = world.local_export(ACCOUNT)
    runner = world.runner(part_limit=part_limit)
    # Hour by hour, as the scheduler would run it: one window per grid step.
    for hour in range(1, 25):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * 60_000
        for dataset in ("email_events", "sms_events", "custom_events", "subscribers"):
            report = runner.run_day(export.id, dataset, DAY, run_id=f"run-{hour}")
            assert report.complete == (hour == 24), (dataset, hour)
    return world.root / "bucket", export.id
