"""Control-plane rows in the exact shapes the code writes, in bulk (issue 23's benchmark and EXPLAIN test).

A template export is delivered by the real runner (`deliver_template`); its windows, parts and
run-log rows are then copied to other export ids and earlier days with ``INSERT ... SELECT`` over
``generate_series``, shifted in time (`replicate`). Part ids are kept for the last 7 days only, as
reconciliation prunes them. `copy_summaries` copies a compacted export's day summaries the same way.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS, Window
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.store.run_log import RunLog
from seqexport_dagster_tests.support.world import DAY0, World

PART_IDS_DAYS = 7
#: The parts indexes before migration 0007_retention (today's shapes), and back to 0007's.
TODAY_INDEXES = (
    "CREATE INDEX ix_parts_lookup ON parts (export_id, dataset, from_ms, to_ms, location)",
    "DROP INDEX ix_parts_window",
)
RETENTION_INDEXES = ("DROP INDEX ix_parts_lookup", "CREATE INDEX ix_parts_window ON parts (window_id)")


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


_DATE = "to_char(to_timestamp((t.from_ms + d.n * CAST({day} AS BIGINT)) / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


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
                " config_version, destination_version, export_now_at, created_at + :d0 * CAST(:day AS BIGINT), updated_at, deleted_at"
                " FROM exports, generate_series(:k0, :k1) k(n) WHERE id = :t"
                " ON CONFLICT (id) DO NOTHING"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO export_datasets (export_id, dataset, added_at, removed_at, position_ms, failures)"
                " SELECT 'exp_' || lpad(to_hex(k.n), 16, '0'), dataset, added_at + :d0 * CAST(:day AS BIGINT), removed_at,"
                " position_ms, 0 FROM export_datasets, generate_series(:k0, :k1) k(n)"
                " WHERE export_id = :t AND NOT EXISTS (SELECT 1 FROM export_datasets e"
                "   WHERE e.export_id = 'exp_' || lpad(to_hex(k.n), 16, '0'))"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO windows SELECT " + window_id.format(col="id") + ", 'exp_' || lpad(to_hex(k.n), 16, '0'),"
                " t.dataset, "
                + _DATE.format(day=":day")
                + ", t.from_ms + d.n * CAST(:day AS BIGINT), t.to_ms + d.n * CAST(:day AS BIGINT),"
                " t.run_id || '-' || d.n, t.location, t.status, t.rows, t.parts, t.bytes, t.error,"
                " t.started_at + d.n * CAST(:day AS BIGINT), t.finished_at + d.n * CAST(:day AS BIGINT), t.snapshot_taken_at + d.n * CAST(:day AS BIGINT)"
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
                " t.dataset, t.from_ms + d.n * CAST(:day AS BIGINT), t.to_ms + d.n * CAST(:day AS BIGINT), t.location, t.part, t.key, t.rows,"
                " t.bytes, t.written_at + d.n * CAST(:day AS BIGINT), t.status, t.kind, t.last_recorded_at, t.last_id, t.md5,"
                " CASE WHEN t.to_ms + d.n * CAST(:day AS BIGINT) < :pids THEN NULL ELSE t.ids END, t.landed_at + d.n * CAST(:day AS BIGINT)"
                " FROM parts t, generate_series(:k0, :k1) k(n), generate_series(:d0, :d1) d(n)"
                " WHERE t.export_id = :t"
            ),
            params,
        )
        conn.execute(
            sa.text(
                "INSERT INTO run_log (run_id, export_id, dataset, date, trigger, status, message, started_at,"
                " finished_at) SELECT t.run_id || '-' || d.n, 'exp_' || lpad(to_hex(k.n), 16, '0'), t.dataset,"
                " to_char(to_timestamp((t.started_at + d.n * CAST(:day AS BIGINT) - 180000) / 1000) AT TIME ZONE 'UTC',"
                " 'YYYY-MM-DD'), t.trigger, t.status, t.message, t.started_at + d.n * CAST(:day AS BIGINT),"
                " t.finished_at + d.n * CAST(:day AS BIGINT) FROM run_log t, generate_series(:k0, :k1) k(n),"
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
