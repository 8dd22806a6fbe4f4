"""The dataset assets (by UTC day), the per-export status asset and the per-dataset health check.

One op, ``deliveries``, materializes the four dataset assets (`can_subset`: a run selects the
datasets it writes). Its body is one core call, `delivery.day_run.deliver_day` (the run's policy:
which exports, how, reconciliation, run tags, the run log; the simulator calls it too), and the
Dagster events of its result (`run_events`):
- a run carries a day (the partition) and a batch of exports (run config ``exports``; empty: every
  active export, which is what a date-range backfill launched from the UI delivers);
- the run records a few events, not one per window (issue 23): per dataset, one observation on
  the day with the exports it carried, the windows, rows, files and bytes delivered and the
  failures, named (`seqexport_dagster.delivery.run_summary`); the per-window detail is the control plane's
  ledger, which the CLI, the API and ``export_status`` read;
- a scheduled run (tagged by the sensor) writes what is due; any other run (UI launch, backfill)
  delivers what the day lacks (write-once), never before a dataset's start; with the tag
  ``seqexport/replace=true`` it replaces the day's files instead (an operator's explicit choice);
- one export's failure never fails the run its neighbours delivered in: it is recorded for that
  export (last error, backoff), named in the dataset's observation with the customer message and
  "retries at <time> (attempt n)", and shown red by ``export_status`` and ``exports_healthy``. A
  run whose exports all failed (an "export now" of one export, say) fails with `ExportFailed`,
  whose description is the customer message and the next retry; a run whose exports were all
  paused or deleted ends canceled, as Dagster's terminate does (`batch.run_verdict`);
- every (export, dataset) the run takes on is in the run log with its trigger (scheduled, export
  now, backfill, manual: `day_run.run_trigger`), day and end state, for `seqexport history`;
- a day's cell turns green when every active export has finished it, always inside a run that
  targeted the day, so Dagster's partition status and the cell agree (`defs.day_cells`): the
  sensor's small "cells" runs for scheduled work; a backfill or manual run for its day whenever the
  day is complete after it (even if the run then fails); a run that appended late rows, for the
  days they went to, with the new counters; a run that delivered a day a failed run left red,
  with why it is no longer red (`day_cells.red_day_cells`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any, Final, NoReturn

import dagster as dg
from pydantic import Field

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import day_of, parse_date_key
from seqexport_dagster.defs.day_cells import CELLS, ERROR_TAG, cell_events, red_day_cells
from seqexport_dagster.defs.health import DATASET_CHECK, check_evaluation
from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.defs.run_failure import shown_without_stack
from seqexport_dagster.delivery.batch import DEFAULT_DEADLINE_S, DEFAULT_WORKERS, BatchReport, run_verdict
from seqexport_dagster.delivery.day_run import (
    TRIGGER_TAG,
    DayResult,
    DayRun,
    deliver_day,
)
from seqexport_dagster.delivery.reconcile import Reconciled
from seqexport_dagster.delivery.run_summary import LISTED, DatasetSummary, failures
from seqexport_dagster.errors import ExportFailed, sanitize_error
from seqexport_dagster.store import ControlPlane, run_log

GROUP: Final = "exports"
OP_NAME: Final = "deliveries"
#: On a run that failed: the first failed export's customer message (`day_cells.ERROR_TAG`) and when it is retried.
RETRY_TAG: Final = "seqexport/retry"
#: Dagster's run-retry tags, set on a run we fail on purpose: the scheduler retries it (backoff), so
#: run_retries must not, and must not log that it does not ("Not retrying since ...").
NO_RUN_RETRY: Final = {"dagster/max_retries": "0", "dagster/retry_on_asset_or_op_failure": "true"}


class DeliveryConfig(dg.Config):
    """Launchpad config. Leave ``exports`` empty to deliver the day(s) for every active export."""

    exports: list[str] = Field(default_factory=list, description="Export ids to deliver; empty: all active exports")
    export_now: list[str] = Field(
        default_factory=list, description="Set by the scheduler: the exports whose work is an export now"
    )
    workers: int = Field(default=DEFAULT_WORKERS, ge=1, le=64, description="Exports delivered at once")
    deadline_seconds: float = Field(default=DEFAULT_DEADLINE_S, gt=0, description="Per export, per run")


def summary_observation(
    partition: str, summary: DatasetSummary, accounts: Mapping[str, str] | None = None, *, backfill: bool = False
) -> dg.AssetObservation:
    """The run's one event per dataset: what it delivered, its accounts, and its failures by name
    (each with its account; the failing accounts are listed too, at most `run_summary.LISTED`)."""
    failing = sorted({f.account_id for f in summary.failures})
    carried = {(accounts or {}).get(e, "-") for e in summary.exports}
    return dg.AssetObservation(
        asset_key=summary.dataset,
        partition=partition,
        metadata={
            "exports": len(summary.exports),
            "exports_failed": summary.failed_exports,
            "accounts": len(carried),
            "failing_accounts": ", ".join(failing[:LISTED]) or "-",
            "windows": summary.windows,
            "rows": summary.rows,
            "files": summary.files,
            "size_bytes": summary.bytes,  # the unit in the name: the UI shows a bare number
            "parts_sent": summary.parts_sent,
            "parts_already_landed": summary.parts_already_landed,
            "late_rows": summary.late_rows,
            "reconciled_windows": summary.reconciled_windows,
            "late_rows_found": summary.late_rows_found,
            "failed": dg.MetadataValue.text(summary.failed_lines()),
            **({"backfill": summary.backfill_sentence()} if backfill else {}),
        },
        description=summary.sentence(),
    )


def deliver(
    context: dg.AssetExecutionContext, config: DeliveryConfig, exporter: ExporterResource
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckResult | dg.AssetObservation]:
    datasets = [key.path[-1] for key in context.selected_asset_keys]
    store = exporter.control_plane.store()
    if not datasets:  # only the checks were selected
        yield from health_results(context, store)
        return
    if context.run.tags.get(TRIGGER_TAG) == CELLS:  # the sensor's record of completed days
        yield from cell_events(
            store.engine, store.list_exports(), [(d, parse_date_key(context.partition_key)) for d in datasets]
        )
        return
    run = DayRun(
        context.run.run_id,
        parse_date_key(context.partition_key),
        datasets,
        context.run.tags,
        config.exports,
        config.export_now,
        config.workers,
        config.deadline_seconds,
    )

    def holder_ended(run_id: str) -> bool:
        """A lease held by a run that has ended (its worker died, run monitoring failed it)."""
        ended = context.instance.get_run_by_id(run_id)
        return ended is not None and ended.is_finished

    result = deliver_day(
        run,
        store=store,
        batch=lambda workers, deadline_s: exporter.batch(
            holder=run.run_id, workers=workers, deadline_s=deadline_s, holder_ended=holder_ended
        ),
        lateness_ms=exporter.operator.reconcile_lateness_ms(),
        clock=exporter.clock.now_ms,
        add_tags=lambda tags: context.instance.add_run_tags(run.run_id, tags),
        interrupted=lambda exc: isinstance(exc, KeyboardInterrupt | dg.DagsterExecutionInterruptedError),
    )
    yield from run_events(context, store, run, result)


def run_events(
    context: dg.AssetExecutionContext, store: ControlPlane, run: DayRun, result: DayResult
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckResult | dg.AssetObservation]:
    """What the run shows in Dagster: its log lines, one observation per dataset, the day cells it
    records, the checks a launch selected, and its end (failed or canceled, `batch.run_verdict`)."""
    backfill = not run.scheduled
    log_outcomes(context, result.report, result.summaries, backfill=backfill)
    for summary in result.summaries.values():
        yield summary_observation(context.partition_key, summary, result.accounts, backfill=backfill)
    cells = recorded_cells(store, result.summaries, run.day, run.scheduled, result.reconciled)
    yield from cells
    # A day a failed run left red, delivered since by this run, says why it is no longer red.
    whole = {c.asset_key.path[-1] for c in cells if c.partition == context.partition_key}
    delivered = [d for d, s in result.summaries.items() if d not in whole and len(s.exports) > s.failed_exports]
    if delivered:
        yield from red_day_cells(
            context.instance, store.list_exports(), delivered, run.day, run.run_id, context.job_name
        )
    yield from health_results(context, store)
    verdict = run_verdict(result.report)
    if verdict == run_log.FAILED:
        fail_run(context, result.report, result.accounts)
    if verdict == run_log.CANCELED:
        cancel_run(context, result.report)


def health_results(context: dg.AssetExecutionContext, store: ControlPlane) -> Iterator[dg.AssetCheckResult]:
    """The health check, when the launch selected it (UI launches do; the sensor's runs do not: the
    sensor evaluates it itself every tick that health changes)."""
    exports = store.list_exports() if context.selected_asset_check_keys else []
    for key in context.selected_asset_check_keys:
        evaluation = check_evaluation(exports, key.asset_key.path[-1])
        yield dg.AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=evaluation.passed,
            metadata=dict(evaluation.metadata),
            description=evaluation.description,
            severity=evaluation.severity,
        )


def log_outcomes(
    context: dg.AssetExecutionContext,
    report: BatchReport,
    summaries: Mapping[str, DatasetSummary],
    *,
    backfill: bool = False,
) -> None:
    """Two lines at most per dataset, whatever the number of exports (each failure is named in
    its dataset's observation; a store's words reach the event log as one bounded printable line)."""
    context.log.info(report.summary())
    for summary in summaries.values():
        if backfill:
            context.log.info(f"{summary.dataset}: {summary.backfill_sentence()}")
        if summary.failures:
            context.log.warning(sanitize_error(f"{summary.dataset}: {summary.sentence()}", 2000))


def fail_run(context: dg.AssetExecutionContext, report: BatchReport, accounts: Mapping[str, str]) -> NoReturn:
    """Every export of the run failed: the run fails, leading with the customer message and the
    next retry, with no stack trace on the step nor on the run (`defs.run_failure`; a bug of ours
    keeps its stack)."""
    found = failures(report, accounts)
    first = found[0]
    others = f"\n{len(found) - 1} more failed dataset(s): see the observations above" if len(found) > 1 else ""
    tags = {**NO_RUN_RETRY, ERROR_TAG: sanitize_error(first.message, 200), RETRY_TAG: first.retry}
    context.instance.add_run_tags(context.run.run_id, tags)
    raise shown_without_stack(
        ExportFailed(
            f"{first.message}\nExport {first.export_id} (account {first.account_id}), {first.dataset}: "
            f"{first.retry}.{others}"
        )
    )


def cancel_run(context: dg.AssetExecutionContext, report: BatchReport) -> NoReturn:
    """Every export of the run was paused or deleted: the run ends canceled, as a termination does."""
    why = (
        "; ".join(m for o in report.outcomes.values() for _, m in o.errors)
        or "every export of this run is paused or deleted"
    )
    context.log.info(sanitize_error(why, 500))
    context.instance.report_run_canceling(context.run, message=sanitize_error(why, 500))
    raise dg.DagsterExecutionInterruptedError(why)


def recorded_cells(
    store: ControlPlane,
    summaries: Mapping[str, DatasetSummary],
    day: dt.date,
    scheduled: bool,
    reconciled: list[tuple[str, Reconciled]],
) -> list[dg.AssetMaterialization]:
    """The day cells this run records (`defs.day_cells`), before it fails if it does: after a
    re-delivery, the run's day of each dataset that is complete; after late rows were appended,
    each complete day they went to, with its new counters."""
    records = store.list_exports()
    late = [(r.dataset, day_of(r.window.from_ms)) for _, r in reconciled if r.report is not None]
    if scheduled:
        return cell_events(store.engine, records, late, late_rows=True)
    backfilled = [
        m
        for d, s in summaries.items()
        for m in cell_events(store.engine, records, [(d, day)], backfill=s.backfill_sentence())
    ]
    return backfilled + cell_events(store.engine, records, [x for x in late if x[1] != day], late_rows=True)


def dataset_specs(days: dg.PartitionsDefinition[Any]) -> list[dg.AssetSpec]:
    return [
        dg.AssetSpec(
            name,
            partitions_def=days,
            skippable=True,
            group_name=GROUP,
            kinds={"s3"},
            description=DATASETS[name].description,
        )
        for name in DATASETS
    ]


def build_deliveries(days: dg.PartitionsDefinition[Any]) -> dg.AssetsDefinition:
    def _deliveries(context, config, exporter):  # type: ignore[no-untyped-def]
        # `context`, `config` and `exporter` get their annotations below.
        yield from deliver(context, config, exporter)

    # Dagster reads parameter annotations as objects; postponed annotations would be strings here.
    _deliveries.__annotations__.update(config=DeliveryConfig, exporter=ExporterResource)
    checks = [
        dg.AssetCheckSpec(DATASET_CHECK, asset=name, description=f"Fails while any active export's {name} is failing.")
        for name in DATASETS
    ]
    return dg.multi_asset(name=OP_NAME, specs=dataset_specs(days), check_specs=checks, can_subset=True)(_deliveries)
