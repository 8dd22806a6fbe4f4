"""The four assets: one per dataset, partitioned by export × UTC day.

An asset body only calls `Runner.run_day` and translates its outcome for Dagster:
- each window that lands is logged as an `AssetObservation` (visible before the day completes);
- the (export, day) partition is materialized only when the day's folder is complete, so a green
  cell in the UI is a finished ``date=`` folder;
- `RetryableError` is retried by the short `RETRY_POLICY`; every other error fails at once with
  the customer-readable message (`Failure(allow_retries=False)`); the sensor's backoff retries it;
- `RunInterrupted` (paused or deleted during the run) ends the run *canceled*, through Dagster's
  own termination path: the run is marked canceling, then its steps stop;
- after the due windows, a scheduled run of an event dataset reconciles that dataset's recent
  windows (`seqexport_dagster.reconcile`): inside the export's own run, so never beside a writer.
  Each window given late rows is an `AssetObservation` on the partition of its own day.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import dagster as dg

from seqexport_dagster.defs.partitions import DATE, EXPORT, export_days, partition_key
from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.errors import ExportError, RetryableError, RunInterrupted
from seqexport_dagster.reconcile import Reconciled, reconcile
from seqexport_dagster.runner import DayReport, WindowReport
from seqexport_dagster.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.store.store import COMMITTED, LedgerWindow
from seqexport_dagster.window import iso_ms, parse_date_key

#: Tag the scheduler sensor sets. Runs without it (UI launches, backfills) deliver what the day lacks.
TRIGGER_TAG: Final = "seqexport/trigger"
SCHEDULED: Final = "scheduler"
#: An operator's explicit choice on a backfill (tag value "true"): replace the day's files instead of
#: delivering only what is missing. Needs a key that may overwrite; fails clearly where it may not.
REPLACE_TAG: Final = "seqexport/replace"
GROUP: Final = "exports"

#: Short on purpose: seconds, for throttling and resets. Hours-long retries belong to the sensor.
RETRY_POLICY: Final = dg.RetryPolicy(
    max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def window_metadata(report: WindowReport) -> dict[str, Any]:
    return {
        "window": str(report.window),
        "window_from": iso_ms(report.window.from_ms),
        "window_to": iso_ms(report.window.to_ms),
        "rows": report.rows,
        "files": report.parts,
        "bytes": report.bytes,
        "parts_sent": report.sent.parts,
        "parts_already_landed": report.sent.skipped + report.sent.existed,
        "late_rows": report.sent.late_rows,
    }


def day_metadata(report: DayReport, ledger: list[LedgerWindow], *, rewrite: bool) -> dict[str, Any]:
    """The whole day's folder (from the ledger), plus what this run wrote.

    A day is usually written by several runs; the green cell describes the folder, so its totals
    come from the latest committed attempt of each window of the day.
    """
    latest = {w.window: w for w in ledger if w.status == COMMITTED}
    windows = sorted(latest)
    meta: dict[str, Any] = {
        "windows": len(windows),
        "rows": sum(w.rows for w in latest.values()),
        "files": sum(w.parts for w in latest.values()) + (1 if report.snapshot is not None else 0),
        "bytes": sum(w.bytes for w in latest.values()),
        "run_windows": len(report.windows),
        "run_rows": report.rows,
        "rewrite": rewrite,
    }
    if windows and report.snapshot is None:
        meta["first_window"] = str(windows[0])
        meta["last_window"] = str(windows[-1])
    if report.position_ms is not None:
        meta["position"] = iso_ms(report.position_ms)
    if report.snapshot is not None:
        meta["snapshot_taken_at"] = iso_ms(report.snapshot.snapshot_taken_at)
    return meta


@contextmanager
def customer_errors(context: dg.AssetExecutionContext, *, final_attempt: bool) -> Iterator[None]:
    """Translate the core's outcome for Dagster (see the module docstring)."""
    try:
        yield
    except RunInterrupted as exc:
        # Not a failure and not counted for backoff (the core recorded the window as canceled).
        # A run marked canceling whose steps then fail ends CANCELED, as a UI termination does.
        # (Raising an interrupt here instead would be retried by the RetryPolicy.)
        run = context.instance.get_run_by_id(context.run.run_id)
        if run is not None and run.status not in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED):
            context.instance.report_run_canceling(run, message=str(exc))
        raise dg.Failure(description=f"{exc.message} (run canceled)", allow_retries=False) from None
    except RetryableError as exc:
        if final_attempt:
            raise dg.Failure(description=exc.message, allow_retries=False) from None
        raise
    except ExportError as exc:
        raise dg.Failure(description=exc.message, allow_retries=False) from None
    except Exception as exc:
        # Ours to fix, not the customer's: the step keeps the cause for the operator.
        raise dg.Failure(description=f"internal error ({type(exc).__name__})", allow_retries=False) from exc


def materialized_by_this_run(context: dg.AssetExecutionContext) -> bool:
    """On a step retry: did an earlier attempt of this run already mark the day complete?"""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[context.partition_key]), limit=1
    ).records
    return bool(records) and records[0].run_id == context.run.run_id


def reconciled_metadata(result: Reconciled, report: WindowReport) -> dict[str, Any]:
    return {
        **window_metadata(report),
        "reconciled": True,
        "late_rows_found": result.late_rows,
    }


def export_day(
    context: dg.AssetExecutionContext, exporter: ExporterResource, dataset: str
) -> Iterator[dg.MaterializeResult[Any]]:
    keys = export_days.get_partition_key_from_str(context.partition_key).keys_by_dimension
    export_id, day = keys[EXPORT], parse_date_key(keys[DATE])
    rewrite = context.run.tags.get(TRIGGER_TAG) != SCHEDULED
    replace = rewrite and context.run.tags.get(REPLACE_TAG, "").lower() == "true"
    final_attempt = context.retry_number >= RETRY_POLICY.max_retries
    runner = exporter.runner(count_retryable=final_attempt)

    def on_window(report: WindowReport) -> None:
        context.log_event(
            dg.AssetObservation(
                asset_key=context.asset_key, partition=context.partition_key, metadata=window_metadata(report)
            )
        )

    with customer_errors(context, final_attempt=final_attempt):
        report = runner.run_day(
            export_id, dataset, day, run_id=context.run.run_id, rewrite=rewrite, replace=replace, on_window=on_window
        )
    # Materialized before reconciling: a failing reconciliation must not hide a finished folder.
    if report.complete and not (context.retry_number and materialized_by_this_run(context)):
        ledger = exporter.control_plane.store().ledger(export_id, dataset=dataset, date=day.isoformat())
        yield dg.MaterializeResult(metadata=day_metadata(report, ledger, rewrite=rewrite))
    elif not report.complete:
        context.log.info(
            f"{dataset} {day.isoformat()} still open after {len(report.windows)} window(s); "
            f"position {iso_ms(report.position_ms) if report.position_ms is not None else '-'}"
        )
    lateness_ms = exporter.operator.reconcile_lateness_ms()
    # Scheduled runs only: a backfill delivers its days' late rows anyway, and the schedule comes every frequency.
    if rewrite or dataset not in EVENT_DATASETS or not lateness_ms:
        return
    with customer_errors(context, final_attempt=final_attempt):
        results = reconcile(runner, export_id, lateness_ms=lateness_ms, datasets=(dataset,), run_id=context.run.run_id)
    changed = [(r, r.report) for r in results if r.report is not None]
    for result, rewritten in changed:
        context.log_event(
            dg.AssetObservation(
                asset_key=context.asset_key,
                partition=partition_key(export_id, result.window.date_key),
                metadata=reconciled_metadata(result, rewritten),
            )
        )
    context.log.info(
        f"reconciliation: checked {len(results)} committed window(s) of {dataset}, appended to {len(changed)}"
        + "".join(f"; {r.window} +{r.late_rows} late rows" for r, _ in changed)
    )


def dataset_asset(dataset: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=dataset,
        partitions_def=export_days,
        output_required=False,
        retry_policy=RETRY_POLICY,
        group_name=GROUP,
        kinds={"s3"},
        description=DATASETS[dataset].description,
    )
    # `context` unannotated: dagster reads this annotation unevaluated (postponed annotations).
    def _asset(context, exporter: ExporterResource) -> Iterator[dg.MaterializeResult[Any]]:  # type: ignore[no-untyped-def]
        yield from export_day(context, exporter, dataset)

    return _asset


def build_assets() -> list[dg.AssetsDefinition]:
    return [dataset_asset(name) for name in DATASETS]
