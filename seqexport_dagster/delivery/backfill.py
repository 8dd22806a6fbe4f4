"""Re-delivery of chosen exports over a range of days (`seqexport backfill`), without Dagster.

The same core call as a Dagster backfill run (`BatchRunner.run` with ``rewrite``), under the same
writer lease, day by day: the request is three values however many days, never exports × days
objects. Days before a dataset's start are skipped by the planner (nothing is ever written before
an export existed); days after today are refused.

Without ``redeliver`` a backfill delivers what the ledger says is missing (parts of unknown
outcome, late rows). A bucket that lost files after they landed is not something the ledger can
know (only PutObject is used, DESIGN §4), so ``redeliver`` sends every recorded part of the days
again, create-only: a name still there is left as it is (412), a lost one is written again.
The report's ``notes`` say why an export got nothing (days before its start, nothing missing).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import day_of
from seqexport_dagster.delivery.batch import BatchReport, BatchRunner
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.destination import OperatorPolicy
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store import ControlPlane, run_log
from seqexport_dagster.store.lease import Leases

#: A longer range is several commands: each call stays a bounded amount of work.
MAX_DAYS: Final = 400


def parse_day(field: str, text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except (TypeError, ValueError):
        raise InvalidInput(field, f"{text!r} is not a date: use YYYY-MM-DD (a UTC day)") from None


def backfill_days(start: str, end: str, today: dt.date) -> list[dt.date]:
    first, last = parse_day("from", start), parse_day("to", end)
    if last < first:
        raise InvalidInput("to", f"{end} is before --from {start}: use a day on or after it")
    if last > today:
        raise InvalidInput("to", f"{end} is in the future: use {today.isoformat()} (today, UTC) or earlier")
    count = (last - first).days + 1
    if count > MAX_DAYS:
        raise InvalidInput("to", f"{count} days requested: use at most {MAX_DAYS} days per command")
    return [first + dt.timedelta(days=i) for i in range(count)]


def _backfill(export_id: str) -> str:
    """Every export of `seqexport backfill` is in the run log (history) as a backfill."""
    return run_log.BACKFILL


def backfill(
    store: ControlPlane,
    source: SourceReader,
    policy: OperatorPolicy,
    export_ids: Sequence[str],
    start: str,
    end: str,
    *,
    clock: Callable[[], int],
    datasets: Sequence[str] = (),
    holder: str = "seqexport-backfill",
    redeliver: bool = False,
) -> BatchReport:
    """Re-deliver ``start``..``end`` (inclusive) for the exports; raises `InvalidInput` on bad values."""
    days = backfill_days(start, end, day_of(clock()))
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise InvalidInput("datasets", f"{', '.join(unknown)} unknown: use {', '.join(DATASETS)}")
    before_start: dict[str, str] = {}
    for export_id in export_ids:
        export = store.get_export(export_id)  # NotFound names it before any work
        added = [d.added_at for d in export.datasets if not datasets or d.dataset in datasets]
        first = day_of(min(added)) if added else None
        early = [d for d in days if first is None or d < first]
        if early:
            when = f"{early[0]}" if len(early) == 1 else f"{early[0]}..{early[-1]}"
            before_start[export_id] = (
                f"{when}: before the export's first day{f' {first}' if first else ''}; "
                "nothing is ever written before an export existed"
            )

    def make_runner(**kwargs: object) -> Runner:
        return Runner(store, source, policy, clock=clock, **kwargs)  # type: ignore[arg-type]

    batch = BatchRunner(make_runner, store, Leases(store.engine), holder=holder, clock=clock)
    report = BatchReport()
    for day in days:
        day_report = batch.run(
            export_ids,
            [day],
            datasets or tuple(DATASETS),
            run_id=holder,
            rewrite=True,
            redeliver=redeliver,
            trigger=_backfill,
        )
        for export_id, outcome in day_report.outcomes.items():
            merged = report.outcomes.setdefault(export_id, outcome)
            if merged is not outcome:
                merged.reports += outcome.reports
                merged.errors += outcome.errors
                if outcome.status != "done":
                    merged.status = outcome.status
    for export_id, why in before_start.items():
        report.notes.setdefault(export_id, []).append(why)
    return report


@dataclass(frozen=True, slots=True)
class BackfillSummary:
    """What a backfill did for one export, and, when it wrote nothing, why (what the CLI prints)."""

    export_id: str
    status: str
    written_files: int
    written_rows: int
    written_bytes: int
    present_files: int  # re-sent create-only; the bucket still had them (412), left as they are
    recorded_windows: int  # recorded as delivered and not re-sent (a backfill without redeliver)
    errors: tuple[tuple[str, str], ...]
    why: tuple[str, ...]


def summarize(report: BatchReport, *, redeliver: bool) -> list[BackfillSummary]:
    summaries = []
    for outcome in report.outcomes.values():
        sent = [w.sent for d in outcome.reports for w in d.windows]
        sent += [d.snapshot.sent for d in outcome.reports if d.snapshot is not None]
        recorded = sum(d.skipped_windows for d in outcome.reports)
        written = sum(s.parts for s in sent)
        present = sum(s.existed for s in sent)
        why = list(report.notes.get(outcome.export_id, []))
        if not written and not outcome.errors:
            if present:
                why.append(f"nothing missing: all {present} files re-sent are still in the bucket")
            if recorded and not redeliver:
                why.append(
                    f"{recorded} windows are recorded as delivered; if the bucket lost files, "
                    "run again with --redeliver (create-only: files still there are left as they are)"
                )
            if not why:
                why.append("nothing missing: no window of these days is owed")
        summaries.append(
            BackfillSummary(
                outcome.export_id,
                outcome.status,
                written,
                sum(s.rows for s in sent),
                sum(s.bytes for s in sent),
                present,
                recorded,
                tuple(outcome.errors),
                tuple(why),
            )
        )
    return summaries
