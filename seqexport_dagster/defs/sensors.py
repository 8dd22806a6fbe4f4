"""The one scheduler sensor: control plane in; batched runs, day cells, export status and health out.

A tick costs a fixed number of queries whatever the number of exports: exports (two), the
unfinished attempts (one), leases (one), exports changed since the last tick (two), the in-flight
runs (one), the registered ``exports`` partitions (one), plus one totals query per day that
completes. The policy is `seqexport_dagster.planner`; this module is wiring.

Each tick:
1. registers new exports as partitions of the status asset;
2. requests the due work (`planner.due_work`) of exports without a run in flight or a live writer
   lease, batched by day and shard (`planner.batch`), one run per batch; the run's tags name every
   export and account in it, so the Runs page filters by either;
3. materializes each dataset's days that every active export has now finished (the cursor keeps
   how far each dataset is green; at most `MAX_DAYS_PER_TICK` per tick, so a first tick after an
   upgrade catches up over a few ticks);
4. records the status of exports that changed since the last tick, plus a rotating slice of all of
   them (each export at least every `ROTATION` ticks, so "behind" stays fresh);
5. evaluates the per-dataset ``exports_healthy`` check when the set of failing exports changes.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg
from dagster import SensorEvaluationContext

from seqexport_dagster import planner
from seqexport_dagster.defs.assets import OP_NAME, SCHEDULED, TRIGGER_TAG, export_now_tag, run_trigger, tag_safe
from seqexport_dagster.defs.health import check_evaluation, day_event, failing_digest, status_event
from seqexport_dagster.defs.partitions import EXPORTS
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.errors import ExportError
from seqexport_dagster.idle import idle_reason
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.store import ExportRecord, run_log
from seqexport_dagster.store.fleet import changed_since, day_totals, unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster.store.run_log import RunLog
from seqexport_dagster.window import day_of

#: Run tags: one key per export and per account in the run (``export/<id>``, ``account/<id>``).
EXPORT_TAG_PREFIX: Final = "export/"
ACCOUNT_TAG_PREFIX: Final = "account/"
EXPORTS_COUNT_TAG: Final = "seqexport/exports"
TAG_VALUE: Final = "yes"
IN_FLIGHT: Final = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
EXPORT_JOB: Final = "export_job"
TICK_SECONDS: Final = 30
MAX_DAYS_PER_TICK: Final = 31
ROTATION: Final = 120


def export_tag(export_id: str) -> str:
    return EXPORT_TAG_PREFIX + tag_safe(export_id)


def account_tag(account_id: str) -> str:
    return ACCOUNT_TAG_PREFIX + tag_safe(account_id)


def busy_exports(instance: dg.DagsterInstance) -> set[str]:
    """Exports named by a run that is queued or running (scheduled runs tag every export they carry)."""
    busy = set()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
        busy |= {k[len(EXPORT_TAG_PREFIX) :] for k in run.tags if k.startswith(EXPORT_TAG_PREFIX)}
    return busy


def run_request(b: planner.Batch) -> dg.RunRequest:
    """Tags and config carry export ids and account ids, nothing else about an export (never a secret)."""
    tags = {TRIGGER_TAG: SCHEDULED, EXPORTS_COUNT_TAG: str(len(b.items))}
    for item in b.items:
        tags[export_tag(item.export_id)] = TAG_VALUE
        tags[account_tag(item.account_id)] = TAG_VALUE
        if item.export_now:
            tags[export_now_tag(item.export_id)] = TAG_VALUE
    return dg.RunRequest(
        run_key=b.run_key,
        partition_key=b.day.isoformat(),
        asset_selection=[dg.AssetKey(name) for name in b.datasets],
        asset_check_keys=[],  # the sensor evaluates the health check itself
        run_config={"ops": {OP_NAME: {"config": {"exports": list(b.export_ids)}}}},
        tags=tags,
    )


@dataclass
class Cursor:
    """What the sensor carries between ticks (small: a few dates, a time, a counter, a digest), and
    ``why``: this tick's outcome in words. Dagster's sensor page shows the cursor in full without a
    click (the skip reason only behind "View logs"), so "why" comes first."""

    through: dict[str, str] = field(default_factory=dict)
    since_ms: int | None = None
    tick: int = 0
    failing: str = ""
    why: str = ""

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        try:
            data = json.loads(text)
            return cls(
                dict(data.get("through", {})),
                data.get("since_ms"),
                int(data.get("tick", 0)),
                str(data.get("failing", "")),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dump(self) -> str:
        return json.dumps(
            {
                "why": self.why,
                "through": self.through,
                "since_ms": self.since_ms,
                "tick": self.tick,
                "failing": self.failing,
            }
        )


def day_events(control_plane: Any, records: list[ExportRecord], cursor: Cursor) -> list[dg.AssetMaterialization]:
    """Days every active export has finished since the last tick, per dataset, with their totals."""
    events = []
    for dataset in DATASETS:
        through = planner.dataset_complete_through(records, dataset)
        starts = [s.added_at for e in records for s in e.datasets if s.dataset == dataset]
        if through is None or not starts:
            continue
        first = day_of(min(starts))
        done = cursor.through.get(dataset)
        start = max(first, dt.date.fromisoformat(done) + dt.timedelta(days=1)) if done else first
        days: list[dt.date] = []
        day = start
        while day <= through and len(days) < MAX_DAYS_PER_TICK:
            days.append(day)
            day += dt.timedelta(days=1)
        if not days:
            continue
        totals = day_totals(control_plane.engine, dataset, days)
        events += [day_event(dataset, d, totals[d]) for d in days]
        cursor.through[dataset] = days[-1].isoformat()
    return events


def evaluate(
    instance: dg.DagsterInstance, control_plane: ControlPlaneResource, now_ms: int, cursor_text: str | None
) -> dg.SensorResult:
    store = control_plane.store()
    engine = control_plane.engine()
    cursor = Cursor.parse(cursor_text)
    records = store.list_exports()
    known = set(instance.get_dynamic_partitions(EXPORTS))
    # History stays browsable: partitions of deleted exports are kept, never removed.
    new = [e.id for e in records if e.id not in known]
    busy = busy_exports(instance) | set(Leases(engine).held(now_ms))
    items = planner.due_work(records, now_ms, busy=busy, unfinished=unfinished_attempts(engine))
    requests = [run_request(b) for b in planner.batch(items)]

    events: list[Any] = day_events(store, records, cursor)
    changed, watermark = changed_since(engine, cursor.since_ms if cursor.since_ms is not None else -1)
    for export in records:
        rotating = zlib.crc32(export.id.encode()) % ROTATION == cursor.tick % ROTATION
        if export.id in changed or rotating:
            events.append(status_event(export, now_ms))
    digest = failing_digest(records, DATASETS)
    if digest != cursor.failing or cursor.tick % ROTATION == 0:
        events += [check_evaluation(records, dataset) for dataset in DATASETS]
    cursor.failing, cursor.since_ms, cursor.tick = digest, watermark, cursor.tick + 1
    # Issue 17: a tick that requests nothing says why (nothing due, paused, retries at <time> (attempt n)).
    why = None if requests else idle_reason(records, now_ms, busy=busy)
    cursor.why = why or f"{len(requests)} run(s) requested"
    return dg.SensorResult(
        run_requests=requests,
        skip_reason=why,
        dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest(EXPORTS, new)] if new else [],
        asset_events=events,
        cursor=cursor.dump(),
    )


@dg.sensor(
    name="scheduler_sensor",
    job_name=EXPORT_JOB,
    minimum_interval_seconds=TICK_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches due windows and snapshots in batched runs; records day completeness and export health.",
)
def scheduler_sensor(
    context: SensorEvaluationContext, control_plane: ControlPlaneResource, clock: ClockResource
) -> dg.SensorResult:
    return evaluate(context.instance, control_plane, clock.now_ms(), context.cursor)


#: Why the run log says what it says when Dagster, not the run, ended the run.
ENDED_BY_DAGSTER: Final = {
    run_log.CANCELED: "the run was canceled in Dagster before it finished",
    run_log.FAILED: "the run ended in Dagster before it finished (run worker lost); the scheduler retries it",
}


def settle_run(control_plane: ControlPlaneResource, run: dg.DagsterRun, status: str, now_ms: int) -> int:
    """Make the run log agree with Dagster about a run that ended without our code closing it.

    The run names its exports in its config and its day in its partition tag; a run launched for
    "every active export" (empty list) that never started cannot say which exports it would have
    written, and is left out.
    """
    run_config: dict[str, Any] = dict(run.run_config or {})
    config = run_config.get("ops", {}).get(OP_NAME, {}).get("config", {})
    export_ids = list(config.get("exports") or [])
    day = run.tags.get("dagster/partition")
    datasets = {key.path[-1] for key in run.asset_selection or []}
    if not export_ids or not day:
        return 0
    store = control_plane.store()
    work = []
    for export_id in export_ids:
        try:
            export = store.get_export(export_id)
        except ExportError:
            continue
        work += [(export_id, s.dataset) for s in export.datasets if not datasets or s.dataset in datasets]
    trigger = run_trigger(run.tags)
    return RunLog(control_plane.engine()).settle(
        run.run_id, work, day, trigger(work[0][0]) if work else "", status, now_ms,
        ENDED_BY_DAGSTER[status],
    )  # fmt: skip


def run_log_sensor(dagster_status: dg.DagsterRunStatus, status: str, name: str, what: str) -> dg.SensorDefinition:
    """A sensor that settles the run log (`settle_run`) of every run Dagster ends in ``dagster_status``."""

    @dg.run_status_sensor(
        run_status=dagster_status,
        name=name,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Keeps `seqexport history` in step with Dagster: {what}.",
    )
    def settle(context: dg.RunStatusSensorContext, control_plane: ControlPlaneResource, clock: ClockResource) -> None:
        settle_run(control_plane, context.dagster_run, status, clock.now_ms())

    return settle


run_log_canceled_sensor = run_log_sensor(
    dg.DagsterRunStatus.CANCELED, run_log.CANCELED, "run_log_canceled_sensor", "runs canceled before or while writing"
)
run_log_failed_sensor = run_log_sensor(
    dg.DagsterRunStatus.FAILURE, run_log.FAILED, "run_log_failed_sensor", "runs whose worker was lost"
)
