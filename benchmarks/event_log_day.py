"""Dagster's event log per day at 3,000 exports at 15 minutes, in a PostgreSQL instance (issue 23).

How the rows are made, so that they are what the code writes:
1. ``--batch`` exports (default 50, a full run) at 15 minutes, every dataset, on local folders,
   driven by the real sensor and real batched runs (`demo.ticker.tick`: the sensor's asset events
   stored as the daemon stores them, each run executed in-process) into a PostgreSQL Dagster
   instance, for ``--slots`` quarter-hours after a catch-up run; the snapshot falls due in the last;
2. the event-log rows of the median steady run (by bytes) and of the slot run with the snapshot,
   and one ``export_status`` observation of the sensor, are the templates;
3. one day at ``--exports`` exports is bulk-copied from them with ``INSERT ... SELECT`` over
   ``generate_series`` into the same tables (new run ids, shifted timestamps, one status
   observation per export every 6 hours: the rotation), and the runs' rows too.
Reported: rows and bytes (``pg_total_relation_size`` after ``VACUUM ANALYZE``: heap, TOAST and
indexes) added by the day, for the event log (``event_logs``, ``asset_event_tags``) and for run
storage (``runs``, ``run_tags``). Runs executed in-process lack the 3-4 small lifecycle events a
daemon-launched run has (enqueued, dequeued, starting, the launcher's engine event): each copied
run gets 4 copies of its ``RUN_START`` row for them. And the copies leave out the asset-check events
of the in-process runs (`DAEMON_SKIPS`): the sensor's run requests select no checks.

    python -m benchmarks.event_log_day [--exports 3000] [--batch 50] [--slots 4] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS, day_of
from seqexport_dagster.definitions import build_definitions, exporter_resources
from seqexport_dagster.defs.resources import ControlPlaneResource, FixedClock, OperatorResource, SourceResource
from seqexport_dagster.defs.sensors import ROTATION, TICK_SECONDS
from seqexport_dagster.delivery.planner import MAX_EXPORTS_PER_RUN
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.demo.ticker import tick
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.world import DAY0, World, postgres_database

SLOTS_PER_DAY = 96
EVENT_TABLES = ("event_logs", "asset_event_tags")
RUN_TABLES = ("runs", "run_tags")
LIFECYCLE_EVENTS = 4
#: Events of an in-process run that a daemon-launched one does not have: the sensor's run requests
#: select no asset checks (``asset_check_keys=[]``, the sensor evaluates them itself), while
#: ``execute_in_process`` runs the checks of the selected assets too.
DAEMON_SKIPS = (
    "e.dagster_event_type IN ('ASSET_CHECK_EVALUATION', 'ASSET_CHECK_EVALUATION_PLANNED')"
    " OR (e.dagster_event_type = 'STEP_OUTPUT' AND e.event LIKE '%exports_healthy%')"
)


def sizes(engine: sa.Engine) -> dict[str, dict[str, int]]:
    with engine.connect() as conn:
        return {
            t: {
                "rows": int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()),
                "bytes": int(conn.execute(sa.text(f"SELECT pg_total_relation_size('{t}')")).scalar_one()),
            }
            for t in (*EVENT_TABLES, *RUN_TABLES)
        }


def vacuum(url: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
    engine.dispose()


def drive(world: World, instance: dg.DagsterInstance, batch: int, slots: int, keys: str) -> list[str]:
    """Real ticks and runs: a catch-up run, then ``slots`` quarter-hours (the last one at midnight)."""
    os.environ["SEQEXPORT_BENCH_KEYS"] = keys
    for i in range(batch):
        world.local_export(f"acct{i}", frequency="15m", folder=f"bucket{i}")
    cursor = None
    run_ids: list[str] = []
    # Start so that the last slot is the first of the next day: the day's snapshot falls due in it.
    start = DAY0 + DAY_MS - (slots - 1) * 15 * MINUTE_MS + 3 * MINUTE_MS
    for k in range(slots + 1):
        world.clock.now_ms = start + (k - 1) * 15 * MINUTE_MS if k else start - 15 * MINUTE_MS
        resources = exporter_resources(
            ControlPlaneResource(database_url=world.control_url, secret_keys=dg.EnvVar("SEQEXPORT_BENCH_KEYS")),
            SourceResource(source_url=world.source_url),
            OperatorResource(allow_local="1"),
            FixedClock(at_ms=world.clock()),
        )
        outcome = tick(instance, build_definitions(resources, first_day=day_of(DAY0)), cursor=cursor)
        cursor = outcome.cursor
        failed = [r.run_id for r in outcome.results if not r.success]
        if failed:
            raise RuntimeError(f"runs failed: {failed}")
        run_ids += [r.run_id for r in outcome.results]
    return run_ids


def per_run(engine: sa.Engine, run_ids: list[str]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT run_id, count(*), sum(length(event)), sum(CASE WHEN dagster_event_type = 'ASSET_OBSERVATION'"
                " AND asset_key LIKE '%subscribers%' THEN 1 ELSE 0 END) FROM event_logs e WHERE run_id = ANY(:ids)"
                " AND NOT (" + DAEMON_SKIPS + ") GROUP BY run_id"
            ),
            {"ids": run_ids},
        ).all()
        kinds = conn.execute(
            sa.text(
                "SELECT run_id, coalesce(dagster_event_type, 'log'), count(*) FROM event_logs e"
                " WHERE run_id = ANY(:ids) AND NOT (" + DAEMON_SKIPS + ") GROUP BY 1, 2"
            ),
            {"ids": run_ids},
        ).all()
    by_run: dict[str, dict[str, int]] = {}
    for run_id, kind, count in kinds:
        by_run.setdefault(run_id, {})[kind] = int(count)
    return [
        {"run_id": r[0], "rows": int(r[1]), "bytes": int(r[2]), "snapshot": bool(r[3]), "by_type": by_run[r[0]]}
        for r in rows
    ]


def copy_runs(conn: sa.Connection, template: str, copies: int, tag: str) -> None:
    """``copies`` runs like ``template``: its event-log rows (plus the lifecycle rows), run row and tags."""
    p = {"t": template, "n": copies, "tag": tag, "life": LIFECYCLE_EVENTS}
    conn.execute(
        sa.text(
            "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, partition)"
            " SELECT e.run_id || :tag || k, e.event, e.dagster_event_type, e.timestamp + k * interval '15 seconds',"
            " e.step_key, e.asset_key, e.partition FROM event_logs e, generate_series(1, :n) k WHERE e.run_id = :t"
            " AND NOT (" + DAEMON_SKIPS + ")"
        ),
        p,
    )
    conn.execute(
        sa.text(
            "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, partition)"
            " SELECT e.run_id || :tag || k, e.event, e.dagster_event_type, e.timestamp, e.step_key, e.asset_key,"
            " e.partition FROM event_logs e, generate_series(1, :n) k, generate_series(1, :life) l"
            " WHERE e.run_id = :t AND e.dagster_event_type = 'PIPELINE_START'"
        ),
        p,
    )
    tags = conn.execute(
        sa.text("SELECT count(*) FROM asset_event_tags t JOIN event_logs o ON o.id = t.event_id WHERE o.run_id = :t"),
        p,
    ).scalar_one()
    if tags:  # none today: a run's materializations and observations carry no tags
        raise RuntimeError(f"the template run has {tags} asset event tags, which this copy does not make")
    columns = [
        r[0]
        for r in conn.execute(
            sa.text(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' AND column_name"
                " NOT IN ('id', 'run_id') ORDER BY ordinal_position"
            )  # fmt: skip
        )
    ]
    cols = ", ".join(columns)
    conn.execute(
        sa.text(
            f"INSERT INTO runs (run_id, {cols}) SELECT r.run_id || :tag || k, {cols} FROM runs r,"
            " generate_series(1, :n) k WHERE r.run_id = :t"
        ),
        p,
    )
    conn.execute(
        sa.text(
            "INSERT INTO run_tags (run_id, key, value) SELECT t.run_id || :tag || k, t.key, t.value"
            " FROM run_tags t, generate_series(1, :n) k WHERE t.run_id = :t"
        ),
        p,
    )


def copy_status(conn: sa.Connection, event_id: int, copies: int, modulo: int = 3000, start: int = 0) -> None:
    """``copies`` runless ``export_status`` observations like ``event_id``, one partition each
    (``exp_<k % modulo>`` for k after ``start``)."""
    conn.execute(
        sa.text(
            "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, partition)"
            " SELECT e.run_id, e.event, e.dagster_event_type, e.timestamp + k * interval '1 second', e.step_key,"
            " e.asset_key, 'exp_' || lpad(to_hex(k % :m), 16, '0') FROM event_logs e, generate_series(:s + 1, :s + :n) k"
            " WHERE e.id = :id"
        ),
        {"id": event_id, "n": copies, "m": modulo, "s": start},
    )


def measure(exports: int, batch: int, slots: int, progress: Any) -> dict[str, Any]:
    keys = new_key_spec("bench")
    with tempfile.TemporaryDirectory() as tmp, postgres_database() as dagster_url:
        root = Path(tmp)
        world = World.in_files(root, DAY0, keys)
        overrides = {"storage": {"postgres": {"postgres_url": dagster_url}}}
        try:
            generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(subscribers=200))
            for i in range(batch):  # every export reads an account of its own
                generate_account(world.source_engine, f"acct{i}", DAY0, DAY0 + 2 * DAY_MS, scale=Scale(subscribers=20))
            (root / "home").mkdir()
            with dg.instance_for_test(overrides=overrides, temp_dir=str(root / "home")) as instance:
                run_ids = drive(world, instance, batch, slots, keys)
            progress(f"{len(run_ids)} real runs of {batch} exports")
            engine = sa.create_engine(dagster_url)
            runs = per_run(engine, run_ids)
            steady = [r for r in runs if r["run_id"] != run_ids[0] and not r["snapshot"]]
            snapshot = [r for r in runs if r["snapshot"]]
            template = sorted(steady, key=lambda r: r["bytes"])[len(steady) // 2]
            with engine.connect() as conn:
                status = conn.execute(
                    sa.text(
                        # The sensor's record of an export's status: an observation on a change, or
                        # the materialization that registers its partition (the same metadata).
                        "SELECT id, length(event) FROM event_logs WHERE run_id = '' AND dagster_event_type IN"
                        " ('ASSET_OBSERVATION', 'ASSET_MATERIALIZATION') AND asset_key LIKE '%export_status%'"
                        " ORDER BY id DESC LIMIT 1"
                    )
                ).one()
                runless = conn.execute(
                    sa.text(
                        "SELECT coalesce(dagster_event_type, 'log'), count(*), sum(length(event)) FROM event_logs"
                        " WHERE run_id = '' GROUP BY 1"
                    )
                ).all()
            vacuum(dagster_url)
            before = sizes(engine)
            runs_per_day = SLOTS_PER_DAY * -(-exports // batch)
            snapshot_runs = -(-exports // batch) if snapshot else 0
            status_per_day = exports * (DAY_MS // 1000 // TICK_SECONDS) // ROTATION
            with engine.begin() as conn:
                copy_status(conn, int(status[0]), status_per_day, exports)
            vacuum(dagster_url)
            with_status = sizes(engine)
            with engine.begin() as conn:
                copy_runs(conn, template["run_id"], runs_per_day - snapshot_runs, "-d")
                if snapshot:
                    copy_runs(conn, snapshot[0]["run_id"], snapshot_runs, "-s")
            vacuum(dagster_url)
            after = sizes(engine)
            engine.dispose()
        finally:
            world.dispose()
    added = {t: {k: after[t][k] - before[t][k] for k in ("rows", "bytes")} for t in after}
    event_bytes = sum(added[t]["bytes"] for t in EVENT_TABLES)
    status_bytes = sum(with_status[t]["bytes"] - before[t]["bytes"] for t in EVENT_TABLES)
    run_bytes = (event_bytes - status_bytes) / runs_per_day
    # Other batch sizes from the same measured bytes per run (a run's events do not grow with its exports).
    per_batch = {
        b: (status_bytes + run_bytes * SLOTS_PER_DAY * -(-exports // b)) / 1e6 for b in sorted({25, 50, 75, 100, batch})
    }
    return {
        "exports": exports, "batch": batch, "slots": slots, "runs_per_day": runs_per_day,
        "status_observations_per_day": status_per_day, "template_run": template,
        "snapshot_run": snapshot[0] if snapshot else None, "steady_runs": steady,
        "status_event_bytes": int(status[1]),
        "runless_measured": {k: {"rows": int(c), "bytes": int(b)} for k, c, b in runless},
        "added": added,
        "event_log_rows_per_day": sum(added[t]["rows"] for t in ("event_logs",)),
        "event_log_mb_per_day": event_bytes / 1e6,
        "status_mb_per_day": status_bytes / 1e6, "event_log_bytes_per_run": run_bytes,
        "event_log_mb_per_day_by_batch": per_batch,
        "run_storage_mb_per_day": sum(added[t]["bytes"] for t in RUN_TABLES) / 1e6,
        "load": " ".join(f"{v:.1f}" for v in os.getloadavg()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=3000)
    parser.add_argument(
        "--batch", type=int, default=MAX_EXPORTS_PER_RUN, help="exports per run (default planner.MAX_EXPORTS_PER_RUN)"
    )
    parser.add_argument("--slots", type=int, default=4, help="steady quarter-hours driven for real")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    result = measure(args.exports, args.batch, args.slots, progress)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    print(
        f"event log: {result['event_log_rows_per_day']:,} rows, {result['event_log_mb_per_day']:.1f} MB a day at "
        f"{args.exports:,} exports (target <= 100 MB); runs: {result['run_storage_mb_per_day']:.1f} MB a day",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
