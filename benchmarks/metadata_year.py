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

from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.history import history
from seqexport_dagster.status import export_status
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.fleet import changed_since, day_totals, unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.maintenance import maintain
from seqexport_dagster.store.run_log import RunLog
from seqexport_dagster.verify.ledger import ledger_problems
from seqexport_dagster.window import DAY_MS, MINUTE_MS, Window, day_of
from seqexport_dagster_tests.support.world import DAY0, Clock, World, postgres_database

TABLES = ("windows", "parts", "run_log", "window_days", "exports", "export_datasets")
EVENT_DATASETS = 3
SLOTS_PER_DAY = 96  # 15-minute windows
TARGET_EXPORTS = 3000
KEEP_DAYS = 15  # the 14-day horizon, plus the day in progress
PART_IDS_DAYS = 7
TODAY_INDEX = "CREATE INDEX ix_parts_lookup ON parts (export_id, dataset, from_ms, to_ms, location)"


def export_id(k: int) -> str:
    return f"exp_{k:016x}"


def deliver_template(world: World, slots: int) -> str:
    """One day (``slots`` 15-minute slots) of every dataset, by the real runner, with run-log entries."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(subscribers=50))
    export = world.local_export("acme", frequency="15m")
    runner = world.runner(part_limit=5000)
    log = RunLog(world.control_engine)
    day = Window(DAY0, DAY0 + DAY_MS).day
    for slot in range(1, slots + 1):
        world.clock.now_ms = DAY0 + slot * 15 * MINUTE_MS + 3 * MINUTE_MS
        # The sensor requests a dataset only when it is due: the snapshot once a day, at the last slot.
        for dataset in ("email_events", "sms_events", "custom_events", *(["subscribers"] if slot == slots else [])):
            run_id = f"run-{slot:03d}-{dataset[:3]}"
            log.start(run_id, export.id, dataset, day.isoformat(), "scheduled", world.clock())
            runner.run_day(export.id, dataset, day, run_id=run_id)
            log.finish(run_id, export.id, dataset, "succeeded", world.clock())
    world.clock.now_ms = DAY0 + DAY_MS + 3 * MINUTE_MS
    return export.id


_DATE = "to_char(to_timestamp((t.from_ms + d.n * {day}) / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


def replicate(engine: sa.Engine, template: str, ks: list[int], days: range, now_ms: int) -> None:
    """Copy the template's rows to exports ``ks`` for day offsets ``days`` (0: the template's day)."""
    day = DAY_MS
    with engine.begin() as conn:
        lo, hi = conn.execute(
            sa.text("SELECT min(id), max(id) FROM windows WHERE export_id = :t"), {"t": template}
        ).one()
        span = hi - lo + 1
        base = conn.execute(sa.text("SELECT coalesce(max(id), 0) + 1 FROM windows")).scalar_one()
        params: dict[str, Any] = {
            "t": template, "lo": lo, "span": span, "base": base, "nd": len(days), "d0": days.start,
            "d1": days.stop - 1, "k0": min(ks), "k1": max(ks), "day": day, "pids": now_ms - PART_IDS_DAYS * day,
        }  # fmt: skip
        window_id = "(:base + ((k.n - :k0) * :nd + (d.n - :d0)) * :span + (t.{col} - :lo))"
        conn.execute(
            sa.text(
                "INSERT INTO exports SELECT 'exp_' || lpad(to_hex(k.n), 16, '0'), 'acct_' || k.n, provider, bucket,"
                " region, endpoint, prefix || k.n, access_key_id, secret_ciphertext, frequency, lag_ms, status,"
                " config_version, destination_version, export_now_at, created_at + :d0 * :day, updated_at, deleted_at"
                " FROM exports, generate_series(:k0, :k1) k(n) WHERE id = :t"
                " ON CONFLICT (id) DO NOTHING"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO export_datasets (export_id, dataset, added_at, removed_at, position_ms, failures)"
                " SELECT 'exp_' || lpad(to_hex(k.n), 16, '0'), dataset, added_at + :d0 * :day, removed_at,"
                " position_ms, 0 FROM export_datasets, generate_series(:k0, :k1) k(n)"
                " WHERE export_id = :t AND NOT EXISTS (SELECT 1 FROM export_datasets e"
                "   WHERE e.export_id = 'exp_' || lpad(to_hex(k.n), 16, '0'))"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO windows SELECT " + window_id.format(col="id") + ", 'exp_' || lpad(to_hex(k.n), 16, '0'),"
                " t.dataset, " + _DATE.format(day=":day") + ", t.from_ms + d.n * :day, t.to_ms + d.n * :day,"
                " t.run_id || '-' || d.n, t.location, t.status, t.rows, t.parts, t.bytes, t.error,"
                " t.started_at + d.n * :day, t.finished_at + d.n * :day, t.snapshot_taken_at + d.n * :day"
                " FROM windows t, generate_series(:k0, :k1) k(n), generate_series(:d0, :d1) d(n)"
                " WHERE t.export_id = :t"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO parts (window_id, export_id, dataset, from_ms, to_ms, location, part, key, rows, bytes,"
                " written_at, status, kind, last_recorded_at, last_id, md5, ids, landed_at)"
                " SELECT " + window_id.format(col="window_id") + ", 'exp_' || lpad(to_hex(k.n), 16, '0'),"
                " t.dataset, t.from_ms + d.n * :day, t.to_ms + d.n * :day, t.location, t.part, t.key, t.rows,"
                " t.bytes, t.written_at + d.n * :day, t.status, t.kind, t.last_recorded_at, t.last_id, t.md5,"
                " CASE WHEN t.to_ms + d.n * :day < :pids THEN NULL ELSE t.ids END, t.landed_at + d.n * :day"
                " FROM parts t, generate_series(:k0, :k1) k(n), generate_series(:d0, :d1) d(n)"
                " WHERE t.export_id = :t"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO run_log (run_id, export_id, dataset, date, trigger, status, message, started_at,"
                " finished_at) SELECT t.run_id || '-' || d.n, 'exp_' || lpad(to_hex(k.n), 16, '0'), t.dataset,"
                " to_char(to_timestamp((t.started_at + d.n * :day - 180000) / 1000) AT TIME ZONE 'UTC',"
                " 'YYYY-MM-DD'), t.trigger, t.status, t.message, t.started_at + d.n * :day,"
                " t.finished_at + d.n * :day FROM run_log t, generate_series(:k0, :k1) k(n),"
                " generate_series(:d0, :d1) d(n) WHERE t.export_id = :t"
            ),
            params,
        )
        conn.execute(sa.text("SELECT setval('windows_id_seq', (SELECT max(id) FROM windows))"))


def copy_summaries(engine: sa.Engine, model: str, ks: list[int]) -> None:
    """The fleet's summaries, copied from a compacted export's (the shapes `store.compaction` writes)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO window_days (export_id, dataset, date, location, first_from_ms, last_to_ms, windows,"
                " bounds, parts, rows, bytes, md5_digest, attempts, runs, compacted_at)"
                " SELECT 'exp_' || lpad(to_hex(k.n), 16, '0'), dataset, date, location, first_from_ms, last_to_ms,"
                " windows, bounds, parts, rows, bytes, md5(md5_digest || k.n) || md5(md5_digest), attempts, runs,"
                " compacted_at FROM window_days, generate_series(:k0, :k1) k(n) WHERE export_id = :m"
                " ON CONFLICT DO NOTHING"
            ),
            {"m": model, "k0": min(ks), "k1": max(ks)},
        )


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
        store.list_exports()
        Leases(engine).held(now_ms)
        unfinished_attempts(engine)
        changed_since(engine, now_ms - 30_000)
        day_totals(engine, "email_events", [yesterday])

    problems = ledger_problems(bucket_rows, store, deep, source)
    return {
        "sensor_tick_queries_s": timed(tick),
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
                conn.execute(sa.text(TODAY_INDEX))
            vacuum(control)
            deep_id = export_id(1)
            latest: dict[tuple[str, Window], int] = {}
            for w in world.store.ledger(deep_id):
                if w.status == "committed":
                    latest[(w.dataset, w.window)] = w.rows
            before = {"sizes": sizes(world.control_engine), "times": query_times(world, deep_id, latest, now_ms)}
            progress(f"before: {json.dumps(before['times'])}")
            with world.control_engine.begin() as conn:
                conn.execute(sa.text("DROP INDEX ix_parts_lookup"))
            started = time.perf_counter()
            report = maintain(world.control_engine, now_ms)
            maintain_s = time.perf_counter() - started
            progress(f"maintain: {report.as_dict()} in {maintain_s:.1f} s")
            for i in range(0, len(fleet), 250):
                copy_summaries(world.control_engine, deep_id, fleet[i : i + 250])
            vacuum(control)
            after = {"sizes": sizes(world.control_engine), "times": query_times(world, deep_id, latest, now_ms)}
            progress(f"after: {json.dumps(after['times'])}")
            again = maintain(world.control_engine, now_ms).as_dict()
        finally:
            world.dispose()
    return {
        "exports": exports, "deep_exports": deep, "days": days, "slots_per_day": slots,
        "before": before, "after": after, "maintain": report.as_dict(), "maintain_s": maintain_s,
        "second_maintain": again,
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
