"""One run's delivery of one UTC day: the policy a Dagster run (`defs.assets`) and the simulator
share, so that both decide the same way (issue 42: it was four closures in the asset body).

`deliver_day` decides, from the run's tags and config alone:
- which exports: the run config's, or, when it names none (a date-range backfill launched from
  the UI), every active export;
- how: a scheduled run (``seqexport/trigger=scheduler``) writes what is due and then reconciles
  each export's recent windows under its lease (`reconcile.reconcile`, thinned with age); any other
  run delivers what the day lacks (``rewrite``), or replaces the day's files with
  ``seqexport/replace=true``, or sends every recorded file again create-only with
  ``seqexport/redeliver=true``;
- the run tags of a run launched by hand or by a backfill, which names its exports and accounts
  as the scheduler's do (`run_tags.named_tags`, bounded);
- the run log: each (export, dataset) with its trigger (`run_trigger`), and, when the run ends
  by an interruption (Dagster's terminate) or a bug of ours, its open entries closed with that end.

It returns the report and the per-dataset summaries; turning them into Dagster events stays in
`defs.assets`. Nothing here imports Dagster: the caller says what an interruption is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.delivery import reconcile as reconciliation
from seqexport_dagster.delivery.batch import DEFAULT_DEADLINE_S, DEFAULT_WORKERS, BatchReport, BatchRunner
from seqexport_dagster.delivery.reconcile import Reconciled, reconcile
from seqexport_dagster.delivery.run_summary import DatasetSummary, summarize
from seqexport_dagster.delivery.run_tags import named_tags
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.store import ACTIVE, ControlPlane, run_log
from seqexport_dagster.store.run_log import RunLog

#: Tag the scheduler sensor sets. Runs without it (UI launches, backfills) deliver what the day lacks.
TRIGGER_TAG: Final = "seqexport/trigger"
SCHEDULED: Final = "scheduler"
#: An operator's explicit choice on a backfill (tag value "true"): replace the day's files instead of
#: delivering only what is missing. Needs a key that may overwrite; fails clearly where it may not.
REPLACE_TAG: Final = "seqexport/replace"
#: A backfill that sends every recorded file of the day again, create-only (a bucket lost files).
REDELIVER_TAG: Final = "seqexport/redeliver"
#: How many of the run's exports are an "export now" (the ids are in the run config, ``export_now``).
EXPORT_NOW_TAG: Final = "seqexport/export-now"
#: Dagster's own tag on the runs of a backfill.
BACKFILL_TAG: Final = "dagster/backfill"


def run_trigger(tags: Mapping[str, str], export_now: Iterable[str] = ()) -> Callable[[str], str]:
    """How the run was started, per export: the run log's trigger words (``export_now``: the run
    config's ids of exports whose work is an "export now")."""
    if tags.get(TRIGGER_TAG) == SCHEDULED:
        now = set(export_now)
        return lambda export_id: run_log.EXPORT_NOW if export_id in now else run_log.SCHEDULED
    fixed = run_log.BACKFILL if BACKFILL_TAG in tags else run_log.MANUAL
    return lambda export_id: fixed


@dataclass(frozen=True)
class DayRun:
    """What a run is asked: its id, day, datasets, tags, and config (``exports`` empty: every active one)."""

    run_id: str
    day: dt.date
    datasets: Sequence[str]
    tags: Mapping[str, str]
    exports: Sequence[str] = ()
    export_now: Sequence[str] = ()
    workers: int = DEFAULT_WORKERS
    deadline_s: float = DEFAULT_DEADLINE_S

    @property
    def scheduled(self) -> bool:
        return self.tags.get(TRIGGER_TAG) == SCHEDULED

    def flag(self, tag: str) -> bool:
        """An operator's choice on a run that is not scheduled (a scheduled run never replaces)."""
        return not self.scheduled and self.tags.get(tag, "").lower() == "true"


@dataclass
class DayResult:
    report: BatchReport
    summaries: dict[str, DatasetSummary]
    #: Export id → account id, for every export in the control plane (names in events and tags).
    accounts: dict[str, str]
    reconciled: list[tuple[str, Reconciled]] = field(default_factory=list)


def deliver_day(
    run: DayRun,
    *,
    store: ControlPlane,
    batch: Callable[[int, float], BatchRunner],
    lateness_ms: int,
    clock: Callable[[], int],
    add_tags: Callable[[dict[str, str]], None] | None = None,
    interrupted: Callable[[BaseException], bool] = lambda exc: isinstance(exc, KeyboardInterrupt),
    reconcile_sleep: Callable[[float], None] | None = None,
) -> DayResult:
    """Deliver ``run``'s day (see the module docstring). ``batch(workers, deadline_s)`` makes the
    run's `BatchRunner` (its lease holder is the run); ``add_tags`` tags a run that is not
    scheduled; ``interrupted`` tells a termination from a bug when the batch raises."""
    records = store.list_exports()
    accounts = {e.id: e.account_id for e in records}
    export_ids = list(run.exports) or [e.id for e in records if e.status == ACTIVE]
    events = [d for d in run.datasets if d in EVENT_DATASETS]
    reconciled: list[tuple[str, Reconciled]] = []

    def after_export(runner: Runner, export_id: str) -> list[tuple[str, Reconciled]]:
        """Scheduled runs repair late and erased rows of recent windows, under the export's lease."""
        if not (run.scheduled and lateness_ms and events):
            return []
        results = reconcile(
            runner,
            export_id,
            lateness_ms=lateness_ms,
            datasets=events,
            run_id=run.run_id,
            sleep=reconcile_sleep,
            thin=reconciliation.THIN_SCHEDULED_RECHECK,
        )
        return [(export_id, r) for r in results if r.report is not None]

    def on_note(note: object) -> None:
        reconciled.append(note)  # type: ignore[arg-type]  # after_export's items, relayed as they are

    if not run.scheduled and add_tags is not None:
        # A run launched by hand or by a backfill names its exports and accounts as the scheduler's do.
        add_tags(named_tags((e, accounts.get(e, "-")) for e in export_ids))
    try:
        report = batch(run.workers, run.deadline_s).run(
            export_ids,
            [run.day],
            run.datasets,
            run_id=run.run_id,
            rewrite=not run.scheduled,
            replace=run.flag(REPLACE_TAG),
            redeliver=run.flag(REDELIVER_TAG),
            after_export=after_export,
            on_note=on_note,
            trigger=run_trigger(run.tags, run.export_now),
        )
    except BaseException as exc:
        # Terminated (Dagster interrupts the step), or our own bug: close the run log's open
        # entries with the run's end state.
        status, why = (
            (run_log.CANCELED, "the run was canceled in Dagster before it finished")
            if interrupted(exc)
            else (run_log.FAILED, f"internal error ({type(exc).__name__})")
        )
        RunLog(store.engine).close_run(run.run_id, status, clock(), why)
        raise
    summaries = summarize(report, run.datasets, accounts, reconciled)
    return DayResult(report, summaries, accounts, reconciled)
