"""`run_summary`: a run's few events per dataset, pure, from a `BatchReport` (issue 23)."""

from __future__ import annotations

import datetime as dt

from seqexport_dagster.contract.window import HOUR_MS, Window
from seqexport_dagster.delivery.attempt import Sent
from seqexport_dagster.delivery.batch import DONE, FAILED, BatchReport, ExportOutcome
from seqexport_dagster.delivery.reconcile import Reconciled
from seqexport_dagster.delivery.run_summary import LISTED, summarize
from seqexport_dagster.delivery.runner import DayReport, WindowReport
from seqexport_dagster_tests.support.world import DAY0

DAY = dt.date(2026, 9, 30)


def window(i: int, rows: int, sent: Sent | None = None) -> WindowReport:
    w = Window(DAY0 + i * HOUR_MS, DAY0 + (i + 1) * HOUR_MS)
    return WindowReport("email_events", w, rows, 1, rows * 10 + 20, True, sent=sent or Sent(parts=1))


def test_one_summary_per_dataset_with_totals_and_failures_named() -> None:
    report = BatchReport()
    report.outcomes["exp_a"] = ExportOutcome(
        "exp_a", DONE, reports=[DayReport("exp_a", "email_events", DAY, windows=[window(0, 5), window(1, 7)])]
    )
    report.outcomes["exp_b"] = ExportOutcome(
        "exp_b", FAILED, errors=[("email_events", "bucket b does not exist")],
        retries={"email_events": "retries at 2026-09-30T01:15:00.000Z (attempt 2)"},
    )  # fmt: skip
    late = Reconciled("email_events", Window(DAY0 - HOUR_MS, DAY0), 3, window(-1, 3, Sent(parts=1, late_rows=3)))
    summaries = summarize(
        report, ["email_events", "sms_events"], {"exp_a": "acme", "exp_b": "globex"}, [("exp_a", late)]
    )
    email, sms = summaries["email_events"], summaries["sms_events"]
    assert (len(email.exports), email.windows, email.rows, email.files) == (2, 2, 12, 2)
    assert email.bytes == 70 + 90 and email.parts_sent == 2
    assert (email.reconciled_windows, email.late_rows_found, email.failed_exports) == (1, 3, 1)
    assert email.failed_lines() == (
        "exp_b (account globex): bucket b does not exist (retries at 2026-09-30T01:15:00.000Z (attempt 2))"
    )
    assert (
        "2 export(s): 2 window(s), 12 rows" in email.sentence()
        and "1 failed: exp_b (account globex)" in email.sentence()
    )
    assert (len(sms.exports), sms.windows, sms.failures, sms.failed_lines()) == (0, 0, [], "-")


def test_failures_outside_a_dataset_count_under_the_first_and_the_listing_is_bounded() -> None:
    report = BatchReport()
    for i in range(LISTED + 7):
        report.outcomes[f"exp_{i:03d}"] = ExportOutcome(f"exp_{i:03d}", FAILED, errors=[("-", "lease not claimed")])
    (email,) = summarize(report, ["email_events"], {}).values()
    assert email.failed_exports == LISTED + 7 and len(email.exports) == LISTED + 7
    lines = email.failed_lines().splitlines()
    assert len(lines) == LISTED + 1 and lines[-1] == "... and 7 more"
    assert lines[0] == "exp_000 (account -): lease not claimed (retries at the next tick)"
