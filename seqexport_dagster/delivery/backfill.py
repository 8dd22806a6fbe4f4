"""Re-delivery of chosen exports over a range of days (`seqexport backfill`), without Dagster.

The same core call as a Dagster backfill run (`BatchRunner.run` with ``rewrite``), under the same
writer lease, day by day: the request is three values however many days, never exports × days
objects. Days before a dataset's start are skipped by the planner (nothing is ever written before
an export existed); days after today are refused.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
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
) -> BatchReport:
    """Re-deliver ``start``..``end`` (inclusive) for the exports; raises `InvalidInput` on bad values."""
    days = backfill_days(start, end, day_of(clock()))
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise InvalidInput("datasets", f"{', '.join(unknown)} unknown: use {', '.join(DATASETS)}")
    for export_id in export_ids:
        store.get_export(export_id)  # NotFound names it before any work

    def make_runner(**kwargs: object) -> Runner:
        return Runner(store, source, policy, clock=clock, **kwargs)  # type: ignore[arg-type]

    batch = BatchRunner(make_runner, store, Leases(store.engine), holder=holder, clock=clock)
    report = BatchReport()
    for day in days:
        day_report = batch.run(
            export_ids, [day], datasets or tuple(DATASETS), run_id=holder, rewrite=True, trigger=_backfill
        )
        for export_id, outcome in day_report.outcomes.items():
            merged = report.outcomes.setdefault(export_id, outcome)
            if merged is not outcome:
                merged.reports += outcome.reports
                merged.errors += outcome.errors
                if outcome.status != "done":
                    merged.status = outcome.status
    return report
