"""Control-plane metadata over a year at 3,000 exports: today's shapes (nothing pruned) against
compaction (`seqexport maintain`), measured in the same run on PostgreSQL (issue 23).

How the rows are made, so that they are exactly what the code writes:
1. a template export (15-minute windows, every dataset) is delivered for one day by the real
   runner, with a run-log entry per run and dataset, into a fresh control plane;
2. its windows, parts and run-log rows are copied in bulk (``INSERT ... SELECT`` over
   ``generate_series``) to other export ids and earlier days, shifted in time; part ids are kept
   only for the last 7 days, as reconciliation prunes them;
3. "deep" exports get a whole year this way; the fleet (3,000 exports) gets the current day.

Before: measured as generated (nothing is ever pruned today). After: the real `maintain` compacts
the deep exports' old days; the fleet's summaries are then copied from a deep export's (the same
shapes), so the after database holds 3,000 exports x one year. Sizes are after ``VACUUM FULL``.
The two-year projection multiplies measured bytes per row by the rows the retention keeps.

``python -m benchmarks.metadata_year [--quick] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, Window, day_of
from seqexport_dagster.delivery import planner
from seqexport_dagster.delivery.planner import MAX_EXPORTS_PER_RUN
from seqexport_dagster.management.history import history
from seqexport_dagster.management.status import export_status
from seqexport_dagster.management.verify.ledger import ledger_problems
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.fleet import changed_since, day_totals, fleet_exports, unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.maintenance import maintain
from seqexport_dagster_tests.support.explain import captured, hot_paths, seq_scans
from seqexport_dagster_tests.support.metadata_rows import (
    RETENTION_INDEXES,
    TODAY_INDEXES,
    copy_summaries,
    deliver_template,
    export_id,
    replicate,
)
from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database

TABLES = ("windows", "parts", "run_log", "window_days", "exports", "export_datasets")
EVENT_DATASETS = 3
SLOTS_PER_DAY = 96  # 15-minute windows
TARGET_EXPORTS = 3000
KEEP_DAYS = 15  # the 14-day horizon, plus the day in progress


def sizes(engine: sa.Engine) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        for table in TABLES:
            rows = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
            size = conn.execute(sa.text(f"SELECT pg_total_relation_size('{table}')")).scalar_one()
            out[table] = {"rows": int(rows), "bytes": int(size)}
        indexes = conn.execute(
            sa.text(
                "SELECT c.relname, pg_relation_size(i.indexrelid) FROM pg_index i JOIN pg_class c"
                " ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname = ANY(:names)"
            ),
            {"names": list(TABLES)},
        ).all()
        out["index_bytes"] = {name: int(size) for name, size in indexes}
        out["database_bytes"] = int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
    return out


def vacuum(url: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("VACUUM FULL ANALYZE"))
    engine.dispose()


def timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def query_times(world: World, deep: str, bucket_rows: dict[tuple[str, Window], int], now_ms: int) -> dict[str, Any]:
    engine = world.control_engine
    store = world.store
    yesterday = day_of(now_ms - DAY_MS)
    source = f"file://{world.root / 'bucket'}"

    def tick() -> None:
        """The control-plane queries and planning of a sensor tick (`defs.sensors.evaluate`): since
        the merge a completed day's totals are a day-cell run's (``day_cell_totals_s``), not the tick's.
        The fleet is read as the sensor reads it (`fleet.fleet_exports`, column-only, records kept
        between ticks as the sensor's long-lived process keeps them: the median is a warm tick)."""
        records = fleet_exports(engine)
        busy = set(Leases(engine).held(now_ms))
        items = planner.due_work(records, now_ms, busy=busy, unfinished=unfinished_attempts(engine))
        planner.batch(items)
        changed_since(engine, now_ms - 30_000)

    cell = sorted(e.id for e in store.list_exports())[:MAX_EXPORTS_PER_RUN]

    problems = ledger_problems(bucket_rows, store, deep, source)
    return {
        "sensor_tick_queries_s": timed(tick),
        "day_cell_totals_s": timed(lambda: day_totals(engine, "email_events", [yesterday], cell)),
        "status_s": timed(lambda: export_status(store.get_export(deep), now_ms)),
        "history_s": timed(lambda: history(store, deep, now_ms)),
        "history_runs": len(history(store, deep, now_ms)),
        "verify_ledger_s": timed(lambda: ledger_problems(bucket_rows, store, deep, source), repeat=3),
        "verify_ledger_problems": len(problems),
    }


def measure(exports: int, deep: int, days: int, slots: int, progress: Callable[[str], None]) -> dict[str, Any]:
    spec = new_key_spec("bench")
    with tempfile.TemporaryDirectory() as tmp, postgres_database() as control, postgres_database() as source:
        world = World(Path(tmp), control, source, Clock(DAY0), box=SecretBox.parse(spec))
        try:
            started = time.perf_counter()
            template = deliver_template(world, slots)
            progress(f"template day delivered by the runner in {time.perf_counter() - started:.1f} s")
            # The template's day is the last full day; "now" is 3 minutes into the next one.
            now_ms = world.clock()
            deep_ks = list(range(1, deep + 1))
            for k in deep_ks:
                replicate(world.control_engine, template, [k], range(-(days - 1), 1), now_ms)
            progress(f"{deep} deep exports x {days} days replicated")
            fleet = list(range(deep + 1, exports + 1))
            for i in range(0, len(fleet), 250):
                replicate(world.control_engine, template, fleet[i : i + 250], range(1), now_ms)
            progress(f"{len(fleet)} more exports x 1 day replicated")
            with world.control_engine.begin() as conn:  # today's index set (0007_retention drops this one)
                for ddl in TODAY_INDEXES:
                    conn.execute(sa.text(ddl))
            vacuum(control)
            deep_id = export_id(1)
            latest: dict[tuple[str, Window], int] = {}
            for w in world.store.ledger(deep_id):
                if w.status == "committed":
                    latest[(w.dataset, w.window)] = w.rows
            before = {"sizes": sizes(world.control_engine), "times": query_times(world, deep_id, latest, now_ms)}
            progress(f"before: {json.dumps(before['times'])}")
            with world.control_engine.begin() as conn:
                for ddl in RETENTION_INDEXES:
                    conn.execute(sa.text(ddl))
            started = time.perf_counter()
            report = maintain(world.control_engine, now_ms)
            maintain_s = time.perf_counter() - started
            progress(f"maintain: {report.as_dict()} in {maintain_s:.1f} s")
            for i in range(0, len(fleet), 250):
                copy_summaries(world.control_engine, deep_id, fleet[i : i + 250])
            vacuum(control)
            after = {"sizes": sizes(world.control_engine), "times": query_times(world, deep_id, latest, now_ms)}
            progress(f"after: {json.dumps(after['times'])}")
            # Issue 23, item 4 at full size: every hot path's statements EXPLAIN-ed on the compacted
            # database (3,000 exports with a year of summaries); sequential scans of big tables, by path.
            explained = {}
            for path, run in hot_paths(world, template, now_ms).items():
                statements = captured(world.control_engine, run)
                bad = seq_scans(world.control_engine, statements)
                explained[path] = {"statements": len(statements), "seq_scans": [b[:400] for b in bad]}
            progress(f"EXPLAIN: {json.dumps(explained)}")
            again = maintain(world.control_engine, now_ms).as_dict()
        finally:
            world.dispose()
    return {
        "exports": exports, "deep_exports": deep, "days": days, "slots_per_day": slots,
        "before": before, "after": after, "maintain": report.as_dict(), "maintain_s": maintain_s,
        "second_maintain": again, "explain_after": explained,
    }  # fmt: skip


def project(r: dict[str, Any]) -> dict[str, float]:
    """Bytes per export-window (windows + parts + run log, with indexes) before; per summary after;
    scaled to 3,000 exports at 15 minutes (3 event datasets and the daily snapshot)."""
    b = r["before"]["sizes"]
    windows_rows = b["windows"]["rows"]
    live_bytes = sum(b[t]["bytes"] for t in ("windows", "parts", "run_log"))
    per_window = live_bytes / windows_rows
    a = r["after"]["sizes"]
    per_summary = a["window_days"]["bytes"] / max(1, a["window_days"]["rows"])
    windows_per_day = TARGET_EXPORTS * (EVENT_DATASETS * SLOTS_PER_DAY + 1)
    summaries_per_day = TARGET_EXPORTS * (EVENT_DATASETS + 1)
    return {
        "bytes_per_window_row": per_window,
        "bytes_per_summary_row": per_summary,
        "before_gb_per_day": per_window * windows_per_day / 1e9,
        "before_gb_1_year": per_window * windows_per_day * 365 / 1e9,
        "before_gb_2_years": per_window * windows_per_day * 730 / 1e9,
        "after_live_gb": per_window * windows_per_day * KEEP_DAYS / 1e9,
        "after_summaries_gb_2_years": per_summary * summaries_per_day * 730 / 1e9,
        "after_gb_2_years": (per_window * windows_per_day * KEEP_DAYS + per_summary * summaries_per_day * 730) / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 exports, 2 deep ones over 20 days, 8 slots a day")
    parser.add_argument("--exports", type=int, default=TARGET_EXPORTS)
    parser.add_argument("--deep", type=int, default=3, help="exports given the whole year")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.exports, args.deep, args.days, slots = 30, 2, 20, 8
    else:
        slots = SLOTS_PER_DAY

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    result = measure(args.exports, args.deep, args.days, slots, progress)
    result["projection"] = project(result)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
