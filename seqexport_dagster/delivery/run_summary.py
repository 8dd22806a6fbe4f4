"""What one batched run delivered, per dataset: the few numbers Dagster's event log keeps (issue 23).

A run of 50 exports at 15 minutes lands about 50 windows per dataset. Recording each window in
Dagster's event log made that log grow per export-window (about 2.5 KB each, 1.3 M rows a day at
3,000 exports) while the same detail is already in the control plane's ledger, which the CLI, the
API and ``export_status`` read. So a run reports one summary per dataset instead:
- how many exports it carried for the dataset, and how many of them failed;
- the windows, rows, files and bytes delivered, the parts sent and found already landed, and the
  late rows appended (by backfills and re-deliveries);
- the windows the reconciliation pass rewrote and the late rows it found;
- the failures, named (export, account, customer message, next retry), at most `LISTED` of them
  listed (the count is always complete).

Pure: built from the `BatchReport` and the reconciliation results; no Dagster here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from seqexport_dagster.delivery.batch import FAILED, TIMED_OUT, BatchReport
from seqexport_dagster.delivery.reconcile import Reconciled
from seqexport_dagster.errors import sanitize_error

#: A summary names at most this many failures (the count is always complete).
LISTED: Final = 50


@dataclass(frozen=True, slots=True)
class NamedFailure:
    export_id: str
    account_id: str
    dataset: str
    message: str
    #: "retries at <time> (attempt n)", "paused", ...
    retry: str

    def line(self) -> str:
        return f"{self.export_id} (account {self.account_id}): {self.message} ({self.retry})"


@dataclass(slots=True)
class DatasetSummary:
    dataset: str
    exports: set[str] = field(default_factory=set)
    windows: int = 0
    rows: int = 0
    files: int = 0
    bytes: int = 0
    parts_sent: int = 0
    parts_already_landed: int = 0
    late_rows: int = 0
    reconciled_windows: int = 0
    late_rows_found: int = 0
    #: Windows a backfill found recorded as delivered and did not send again (without redeliver).
    windows_recorded: int = 0
    failures: list[NamedFailure] = field(default_factory=list)

    @property
    def failed_exports(self) -> int:
        return len({f.export_id for f in self.failures})

    def backfill_sentence(self) -> str:
        """What a backfill did for this dataset, the same words in its log, its observation and the
        day cell it records (issue 42: they said "0 rows", ``windows 0`` and ``redelivered true``)."""
        text = f"backfill sent {self.parts_sent} files; {self.parts_already_landed} files already in the bucket"
        if self.windows_recorded:
            text += f"; {self.windows_recorded} windows recorded as delivered, not sent again"
            if not self.parts_sent:
                text += " (files lost from the bucket: launch again with the tag seqexport/redeliver=true)"
        return text

    def sentence(self) -> str:
        text = (
            f"{len(self.exports)} export(s): {self.windows} window(s), {self.rows} rows, "
            f"{self.files} files, {self.bytes} bytes"
        )
        if self.reconciled_windows:
            text += f"; {self.reconciled_windows} window(s) reconciled ({self.late_rows_found} late rows)"
        if self.failures:
            text += f"; {self.failed_exports} failed: " + "; ".join(f.line() for f in self.failures[:3])
            if len(self.failures) > 3:
                text += f"; {len(self.failures) - 3} more"
        return text

    def failed_lines(self) -> str:
        lines = [f.line() for f in self.failures[:LISTED]]
        if len(self.failures) > LISTED:
            lines.append(f"... and {len(self.failures) - LISTED} more")
        return "\n".join(lines) or "-"


def failures(report: BatchReport, accounts: Mapping[str, str]) -> list[NamedFailure]:
    """Each failed (export, dataset) of the run, with its customer message and next retry."""
    return [
        NamedFailure(
            o.export_id,
            accounts.get(o.export_id, "-"),
            dataset,
            sanitize_error(message, 500),
            o.retries.get(dataset, "retries at the next tick"),
        )
        for o in report.outcomes.values()
        if o.status in (FAILED, TIMED_OUT)
        for dataset, message in o.errors
    ]


def summarize(
    report: BatchReport,
    datasets: Iterable[str],
    accounts: Mapping[str, str],
    reconciled: Iterable[tuple[str, Reconciled]] = (),
) -> dict[str, DatasetSummary]:
    """One summary per dataset of the run (``datasets``, in order), whatever happened to it.

    A failure outside any dataset (the export could not be read, its lease not claimed: dataset
    "-") is counted under the run's first dataset, so it is never lost from the run's events.
    """
    out = {d: DatasetSummary(d) for d in datasets}
    if not out:
        return out
    first = next(iter(out.values()))
    for outcome in report.outcomes.values():
        for day in outcome.reports:
            summary = out.get(day.dataset)
            if summary is None:
                continue
            summary.exports.add(outcome.export_id)
            summary.windows += len(day.windows)
            summary.windows_recorded += day.skipped_windows
            summary.rows += day.rows
            summary.files += day.files
            summary.bytes += day.bytes
            for window in day.windows:
                summary.parts_sent += window.sent.parts
                summary.parts_already_landed += window.sent.skipped + window.sent.existed
                summary.late_rows += window.sent.late_rows
            if day.snapshot is not None:
                summary.parts_sent += day.snapshot.sent.parts
                summary.parts_already_landed += day.snapshot.sent.skipped + day.snapshot.sent.existed
    for failure in failures(report, accounts):
        summary = out.get(failure.dataset, first)
        summary.exports.add(failure.export_id)
        summary.failures.append(failure)
    for export_id, result in reconciled:
        summary = out.get(result.dataset)
        if summary is None or result.report is None:
            continue
        summary.exports.add(export_id)
        summary.reconciled_windows += 1
        summary.late_rows_found += result.late_rows
    return out
