"""The one scheduler sensor: control plane in; batched runs, day cells, export status and health out.

A tick costs a fixed number of queries whatever the number of exports: exports (two, column only,
records rebuilt only for exports whose rows changed: `fleet.fleet_exports`), the
unfinished attempts (one), leases (one), exports changed since the last tick (two), the in-flight
runs (one), the registered ``exports`` partitions (one), plus one totals query per day that
completes. The policy is `seqexport_dagster.delivery.planner`; this module is wiring.

Each tick:
1. registers new exports as partitions of the status asset;
2. requests the due work (`planner.due_work`) of exports without a run in flight or a live writer
   lease, batched by day and shard (`planner.batch`), one run per batch; the run's config lists its
   exports, and its tags are bounded whatever their number (`run_tags`: its shards, and each export
   and account when there are at most `NAMED_IN_TAGS`);
3. requests a small run recording each dataset's days that every active export has now finished
   (`defs.day_cells`; the cursor keeps how far each dataset is green; at most
   `day_cells.MAX_DAYS_PER_TICK` days per tick, so a first tick after an upgrade catches up);
4. records the status of exports whose health changed, at most `MAX_STATUS_PER_TICK` observations
   a tick, and a status run for each export that starts or stops failing (`status_events`,
   `defs.export_status`); once an hour, a run refreshes the status of a sixth of the exports, so
   each is recorded every 6 hours in a run that ages out with the others (`defs.status_refresh`);
5. evaluates the per-dataset ``exports_healthy`` checks and ``export_status``'s own check when the
   set of failing exports changes.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

import dagster as dg
from dagster import SensorEvaluationContext

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.defs.assets import NO_RUN_RETRY, OP_NAME
from seqexport_dagster.defs.day_cells import CELLS, cell_requests, completed_days
from seqexport_dagster.defs.export_status import MAX_STATUS_RUNS_PER_TICK, STATUS_JOB, status_job
from seqexport_dagster.defs.health import (
    check_evaluation,
    failing_digest,
    first_status,
    status_check_evaluation,
    status_event,
)
from seqexport_dagster.defs.partitions import EXPORTS, status_partition
from seqexport_dagster.defs.resources import ClockResource, ControlPlaneResource
from seqexport_dagster.defs.status_refresh import REFRESH_JOB, SLOT_TAG, refresh_due, refresh_job
from seqexport_dagster.delivery import planner
from seqexport_dagster.delivery.day_run import EXPORT_NOW_TAG, SCHEDULED, TRIGGER_TAG
from seqexport_dagster.delivery.idle import idle_headline
from seqexport_dagster.delivery.run_tags import (
    EXPORT_TAG_PREFIX,
    TAG_VALUE,
    account_tag,
    export_tag,
    named_tags,
)
from seqexport_dagster.management.health import behind_band
from seqexport_dagster.store import ACTIVE, DELETED, ExportRecord
from seqexport_dagster.store.fleet import changed_since, fleet_exports, unfinished_attempts
from seqexport_dagster.store.lease import Leases

#: On a status run: the health it records ("failing": the run fails, red; "ok": green).
HEALTH_TAG: Final = "seqexport/health"
IN_FLIGHT: Final = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
EXPORT_JOB: Final = "export_job"
TICK_SECONDS: Final = 30
#: The checks are evaluated again every ROTATION ticks (6 h), and on every change of the failing set.
ROTATION: Final = 720
#: On the sensor's small runs: what they are for.
REFRESH: Final = "status-refresh"
#: Status events per tick at most (the daemon stores a tick's asset events one by one, ~30-100 ms each).
MAX_STATUS_PER_TICK: Final = 100
OK_KEY: Final = f"{ACTIVE}:0"
#: Between the cursor's words and its state.
WHY_SEPARATOR: Final = " | "


def run_exports(run: dg.DagsterRun) -> list[str]:
    """The exports a run carries, from its config (a run launched for every active export: [])."""
    run_config: dict[str, Any] = dict(run.run_config or {})
    config = run_config.get("ops", {}).get(OP_NAME, {}).get("config", {})
    return [str(e) for e in config.get("exports") or []]


def busy_exports(instance: dg.DagsterInstance) -> set[str]:
    """Exports carried by a run that is queued or running (its config lists them; tags are bounded)."""
    busy: set[str] = set()
    for run in instance.get_runs(filters=dg.RunsFilter(job_name=EXPORT_JOB, statuses=IN_FLIGHT)):
        busy |= set(run_exports(run))
        # Runs queued by an earlier version named every export in a tag.
        busy |= {k[len(EXPORT_TAG_PREFIX) :] for k in run.tags if k.startswith(EXPORT_TAG_PREFIX)}
    return busy


def run_tags(items: tuple[planner.WorkItem, ...]) -> dict[str, str]:
    """At most 2 × `NAMED_IN_TAGS` + `planner.SHARDS` + 4 tags, whatever the number of exports."""
    tags = {TRIGGER_TAG: SCHEDULED, **named_tags([(i.export_id, i.account_id) for i in items])}
    now = sum(1 for i in items if i.export_now)
    if now:
        tags[EXPORT_NOW_TAG] = str(now)
    return tags


def run_request(b: planner.Batch) -> dg.RunRequest:
    """Tags and config carry export ids and account ids, nothing else about an export (never a secret)."""
    config: dict[str, Any] = {"exports": list(b.export_ids)}
    export_now = [i.export_id for i in b.items if i.export_now]
    if export_now:
        config["export_now"] = export_now
    return dg.RunRequest(
        job_name=EXPORT_JOB,
        run_key=b.run_key,
        partition_key=b.day.isoformat(),
        asset_selection=[dg.AssetKey(name) for name in b.datasets],
        asset_check_keys=[],  # the sensor evaluates the health check itself
        run_config={"ops": {OP_NAME: {"config": config}}},
        tags=run_tags(b.items),
    )


@dataclass
class Cursor:
    """What the sensor carries between ticks, led by ``why``: this tick's outcome in words.

    Dagster 1.13 stores a `SensorResult`'s ``skip_reason`` exactly as a returned `SkipReason` (the
    tick's skip reason); the sensor page's tick list shows it only as the tooltip of "0 runs
    requested" and in the tick's dialog, but shows the cursor as text in its Cursor column. So the
    cursor starts with the reason in words (``<why> | {state}``), and the state follows as JSON:
    a few dates, a watermark, a counter, a digest, and ``unwell``: for each export whose health is
    not ok (a short hash of its id), its last recorded health and failure count, so a change of
    health is seen without any per-export query (bounded by the exports that are not ok).
    """

    through: dict[str, str] = field(default_factory=dict)
    since_ms: int | None = None
    tick: int = 0
    failing: str = ""
    why: str = ""
    unwell: dict[str, str] = field(default_factory=dict)
    #: Exports (short hashes) whose partition the last tick registered: recorded this tick (`status_events`).
    pending: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        at = text.find(WHY_SEPARATOR + "{")
        state = text[at + len(WHY_SEPARATOR) :] if at >= 0 else text
        try:
            data = json.loads(state)
            return cls(
                dict(data.get("through", {})),
                data.get("since_ms"),
                int(data.get("tick", 0)),
                str(data.get("failing", "")),
                unwell={str(k): str(v) for k, v in dict(data.get("unwell", {})).items()},
                pending=[str(p) for p in data.get("pending", [])],
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dump(self) -> str:
        state = json.dumps(
            {
                "through": self.through,
                "since_ms": self.since_ms,
                "tick": self.tick,
                "failing": self.failing,
                "unwell": self.unwell,
                **({"pending": self.pending} if self.pending else {}),
            },
            separators=(",", ":"),
        )
        return f"{self.why}{WHY_SEPARATOR}{state}"


def short_id(export_id: str) -> str:
    return f"{zlib.crc32(export_id.encode()):08x}"


def status_key(export: ExportRecord, now_ms: int) -> str:
    """What a change of health is: ok, failing (with its failure count), paused, deleted, and a
    dataset's delay leaving its band (`management.health.behind_band`: off schedule, its delay
    doubling, its position moving while off schedule)."""
    failures = max((s.failures for s in export.datasets), default=0) if export.status == ACTIVE else 0
    band = behind_band(export, now_ms) if export.status == ACTIVE else ""
    return f"{export.status}:{failures}" + (f"|{band}" if band else "")


def is_failing(key: str) -> bool:
    health = key.split("|", 1)[0]
    return health.startswith(f"{ACTIVE}:") and health != OK_KEY


def status_run(export: ExportRecord, failing: bool, tick: int) -> dg.RunRequest:
    """One export's change of health on ``export_status`` (`defs.export_status`): red or green."""
    return dg.RunRequest(
        job_name=STATUS_JOB,
        partition_key=status_partition(export.account_id, export.id),
        run_key=f"status|{export.id}|{'failing' if failing else 'ok'}|{tick}",
        tags={
            **NO_RUN_RETRY,
            export_tag(export.id): TAG_VALUE,
            account_tag(export.account_id): TAG_VALUE,
            HEALTH_TAG: "failing" if failing else "ok",
        },
    )


def refresh_run(slot: int, tick: int) -> dg.RunRequest:
    """The hourly run recording the unchanged status of one slice of the exports (`defs.status_refresh`)."""
    return dg.RunRequest(
        job_name=REFRESH_JOB,
        run_key=f"status-refresh|{slot}|{tick}",
        run_config={"ops": {"refresh_export_status": {"config": {"slot": slot}}}},
        tags={**NO_RUN_RETRY, TRIGGER_TAG: REFRESH, SLOT_TAG: str(slot)},
    )


def status_events(
    records: list[ExportRecord],
    cursor: Cursor,
    now_ms: int,
    *,
    new: set[str],
    changed: set[str],
    unregistered: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[dg.AssetObservation | dg.AssetMaterialization], list[dg.RunRequest], list[ExportRecord]]:
    """At most `MAX_STATUS_PER_TICK` status observations and `MAX_STATUS_RUNS_PER_TICK` status runs,
    whatever the number of exports (issue 29): every export whose health changed since it was last
    recorded (ok, failing and its failure count, paused, deleted) or that is new; a deleted export
    once, when it is deleted; an export that starts or stops failing also gets a status run (red,
    or green again). A change left over by a cap stays a change (the cursor still holds the old
    health) and is recorded on the next tick. Unchanged exports are refreshed by the hourly run of
    `defs.status_refresh`, not here: a runless event is never deleted (issue 23).

    A new export (``new``: its ``<account>/<export id>`` partition was registered by the last tick)
    is recorded with a materialization (`health.first_status`): its partition is green from the
    start. Registered the tick before, never in the same tick: the daemon stores a tick's asset
    events before it adds its partitions, and a status cache built in between would drop a
    materialization of a partition that does not exist yet. Exports in ``unregistered`` wait.
    Returned last: the new exports recorded this tick (the others stay pending, within the caps).
    """
    changes: list[ExportRecord] = []
    for export in records:
        if export.id in unregistered:
            continue
        key = status_key(export, now_ms)
        if export.status == DELETED:
            if export.id in changed or export.id in new:
                changes.append(export)
            continue
        if export.id in new or cursor.unwell.get(short_id(export.id), OK_KEY) != key:
            changes.append(export)
    chosen: list[ExportRecord] = []
    runs: list[dg.RunRequest] = []
    for export in changes:
        if len(chosen) >= MAX_STATUS_PER_TICK:
            break
        key = status_key(export, now_ms)
        failing = is_failing(key)
        # A new partition has no run yet: a failing export's needs its red one, whatever the cursor
        # remembers (an export failing across the rename of its bare-id partition).
        before = OK_KEY if export.id in new else cursor.unwell.get(short_id(export.id), OK_KEY)
        if failing != is_failing(before):
            if len(runs) >= MAX_STATUS_RUNS_PER_TICK:
                continue
            runs.append(status_run(export, failing, cursor.tick))
        chosen.append(export)
        if key == OK_KEY or export.status == DELETED:
            cursor.unwell.pop(short_id(export.id), None)
        else:
            cursor.unwell[short_id(export.id)] = key
    events: list[dg.AssetObservation | dg.AssetMaterialization] = [
        first_status(e, now_ms) if e.id in new else status_event(e, now_ms) for e in chosen
    ]
    return events, runs, [e for e in chosen if e.id in new]


def evaluate(
    instance: dg.DagsterInstance, control_plane: ControlPlaneResource, now_ms: int, cursor_text: str | None
) -> dg.SensorResult:
    control_plane.store()  # fails closed on unusable settings (secret keys), as every tick did
    engine = control_plane.engine()
    cursor = Cursor.parse(cursor_text)
    records = fleet_exports(engine)
    known = set(instance.get_dynamic_partitions(EXPORTS))
    # History stays browsable: partitions of deleted exports are kept, never removed; a bare-id key
    # from before issue 42 is replaced by its export's named key (its old events stay in the log).
    unregistered = [e for e in records if status_partition(e.account_id, e.id) not in known]
    fresh = unregistered[:MAX_STATUS_PER_TICK]
    waiting = {e.id for e in unregistered}
    pending = set(cursor.pending)
    new = {e.id for e in records if short_id(e.id) in pending and e.id not in waiting}
    busy = busy_exports(instance) | set(Leases(engine).held(now_ms))
    items = planner.due_work(records, now_ms, busy=busy, unfinished=unfinished_attempts(engine))
    requests = [run_request(b) for b in planner.batch(items)]

    events: list[Any] = []
    # Completed days are recorded by small runs of their own (`defs.day_cells`), after the deliveries.
    cells = cell_requests(EXPORT_JOB, completed_days(records, cursor.through), {**NO_RUN_RETRY, TRIGGER_TAG: CELLS})
    changed, watermark = changed_since(engine, cursor.since_ms if cursor.since_ms is not None else -1)
    observations, status_runs, recorded = status_events(
        records, cursor, now_ms, new=new, changed=changed, unregistered=waiting
    )
    left = {short_id(e) for e in new} - {short_id(e.id) for e in recorded}
    cursor.pending = sorted(left | {short_id(e.id) for e in fresh})
    events += observations
    requests += status_runs
    slot = refresh_due(cursor.tick)
    refresh = [refresh_run(slot, cursor.tick)] if slot is not None else []
    digest = failing_digest(records, DATASETS)
    if digest != cursor.failing or cursor.tick % ROTATION == 0:
        events += [check_evaluation(records, dataset) for dataset in DATASETS]
        events.append(status_check_evaluation(records, DATASETS))
    cursor.failing, cursor.since_ms, cursor.tick = digest, watermark, cursor.tick + 1
    # Issue 17: a tick that requests nothing says why (nothing due, paused, retries at <time> (attempt n));
    # issue 42: in a short line that names accounts, which the tick list shows whole.
    requests += cells
    idle = None if requests else idle_headline(records, now_ms, busy=busy)
    # The hourly refresh is bookkeeping: the cursor still says why no export was due.
    cursor.why = idle if idle else f"{len(requests)} run(s) requested"
    requests += refresh
    why = None if requests else idle
    partitions: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if fresh:
        partitions.append(
            dg.AddDynamicPartitionsRequest(EXPORTS, [status_partition(e.account_id, e.id) for e in fresh])
        )
        bare = [e.id for e in fresh if e.id in known]
        if bare:
            partitions.append(dg.DeleteDynamicPartitionsRequest(EXPORTS, bare))
    return dg.SensorResult(
        run_requests=requests,
        skip_reason=why,
        dynamic_partitions_requests=partitions,
        asset_events=events,
        cursor=cursor.dump(),
    )


#: The scheduler's targets: batched deliveries, one export's change of health, the hourly status refresh.
export_job = dg.define_asset_job(
    EXPORT_JOB,
    selection=dg.AssetSelection.assets(*DATASETS),
    executor_def=dg.in_process_executor,
    description="Delivers the due windows (or snapshots) of a batch of exports for one UTC day.",
)


@dg.sensor(
    name="scheduler_sensor",
    jobs=[export_job, status_job, refresh_job],
    minimum_interval_seconds=TICK_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches due windows and snapshots in batched runs; records day completeness and export health.",
)
def scheduler_sensor(
    context: SensorEvaluationContext, control_plane: ControlPlaneResource, clock: ClockResource
) -> dg.SensorResult:
    return evaluate(context.instance, control_plane, clock.now_ms(), context.cursor)
