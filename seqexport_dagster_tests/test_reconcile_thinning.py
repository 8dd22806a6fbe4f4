"""Reconciliation thinned with age (issue 29): a scheduled run's cost grows with the log of the
lookback, and every late row inside the lookback is still found, exactly once.

The rule itself (`reconcile.rechecked_now`) is checked over the whole life of windows, run by run;
then the real runner and reconciliation deliver rows that became visible at many ages, on a real
database and folder, and the files are read back.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, frequency_ms, iso_ms
from seqexport_dagster.delivery.reconcile import lookback_for, rechecked_now, reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.store import ExportRecord
from seqexport_dagster_tests.support.bucket_audit import source_ids
from seqexport_dagster_tests.support.world import DAY0, World

LAG = 2 * MINUTE_MS


def record(world: World, frequency: str) -> ExportRecord:
    return world.local_export(datasets=("email_events",), frequency=frequency, lag_ms=LAG)


def test_every_age_inside_the_lookback_is_rechecked_soon_and_a_run_checks_few_windows(world: World) -> None:
    for frequency in ("15m", "1h"):
        export = record(world, frequency)
        f = frequency_ms(frequency)
        lookback = lookback_for(export, 24 * HOUR_MS)
        end = DAY0 + 10 * f  # one window's end; runs at every grid step plus the lag
        runs = [end + k * f + LAG for k in range(1, lookback // f + 1)]
        checks = [t for t in runs if rechecked_now(export, Window(end - f, end), t, lookback)]
        assert checks[0] == runs[0] and checks[-1] > end + lookback - 2 * f, "first and last look"
        for visible in range(end, end + lookback - 2 * f, MINUTE_MS):  # a row becomes visible then
            found = next(t for t in checks if t >= visible)
            age = visible - end
            assert found - visible <= max(age // 2, 0) + 2 * f, (frequency, age, found - visible)
        # What one run checks: every window of the lookback at the same run time.
        now = DAY0 + 3 * DAY_MS + LAG
        windows = [Window(t - f, t) for t in range(now - lookback, now - LAG, f)]
        checked = [w for w in windows if rechecked_now(export, w, now, lookback)]
        assert len(checked) <= 20 if frequency == "15m" else len(checked) <= 12, len(checked)
        assert len(windows) >= 96 if frequency == "15m" else len(windows) >= 24


def test_thinned_runs_deliver_rows_that_became_visible_at_any_age_exactly_once(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(30, 8, 0, 0))
    export = world.local_export(datasets=("email_events",), frequency="1h", lag_ms=LAG)
    runner = world.runner(part_limit=20)
    day = dt.date(2026, 9, 30)
    late: dict[int, list[str]] = {}  # hour of the run before which rows appear -> their ids
    for hour in range(1, 47):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        runner.run_day(export.id, "email_events", day + dt.timedelta(days=(hour - 1) // 24))
        # Rows appear late in windows 1 h to 20 h old (every 3 hours), each once.
        if hour >= 22 and hour % 3 == 0:
            age = 1 + (hour * 7) % 20
            window = Window(DAY0 + (hour - age - 1) * HOUR_MS, DAY0 + (hour - age) * HOUR_MS)
            rows = [
                ("acme", f"eev_thin_{hour}_{i}", "delivered", iso_ms(window.from_ms + 60_000 * (i + 1)),
                 iso_ms(window.from_ms + 60_000 * (i + 1)), "sub_acme_0000001", "late@example.com", None, None,
                 f"msg_thin_{hour}_{i}", "Late", None, None, None, None, None)
                for i in range(3)
            ]  # fmt: skip
            insert_rows(world.source_engine, "email_events", rows)
            late[hour] = [r[1] for r in rows]
        reconcile(runner, export.id, lateness_ms=24 * HOUR_MS, thin=True)
    found: Counter[str] = Counter()
    for path in (world.root / "bucket" / "email_events").rglob("*.jsonl.gz"):
        found.update(json.loads(line)["id"] for line in gzip.decompress(path.read_bytes()).splitlines())
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, DAY0 + 46 * HOUR_MS))
    assert late and all(i in found for ids in late.values() for i in ids), "every late row delivered"
    assert set(found) == expected and max(found.values()) == 1, "every row exactly once"
