"""Issue 17, items 1 and 2: history is the truth (the merge of the windows ledger and the run log).

Through the CLI against real Dagster runs on a real instance (batched runs): every trigger
(scheduled, export now, backfill, manual) with its day, a run canceled before its first file, a
failed run, and a batch with one failing export; each status compared with Dagster's own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.management.history import RESTARTED_NOTE
from seqexport_dagster_tests.support.cli_harness import env_for, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.dagster_harness import KEYS_ENV
from seqexport_dagster_tests.support.missing_bucket import missing_bucket_export as create_missing_bucket_export
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"


def test_summarize_rules() -> None:
    """The pure merge of ledger and run log: the last attempt per window decides, the run log adds
    trigger and day, runs that wrote nothing appear, and a lost worker's run is closed as failed."""
    from seqexport_dagster.contract.window import Window
    from seqexport_dagster.management.history import summarize
    from seqexport_dagster.store import WORKER_LOST, LedgerWindow
    from seqexport_dagster.store.run_log import RunLogEntry

    w1, w2 = Window(DAY0, DAY0 + HOUR_MS), Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)

    def attempt(i: int, run: str, window: Window, status: str, rows: int = 0, error: str | None = None) -> LedgerWindow:
        return LedgerWindow(i, "email_events", window, run, status, rows, 1, 10, error, DAY0 + i, DAY0 + i + 1, None)

    def entry(run: str, status: str, at: int, trigger: str = "scheduled", message: str | None = None) -> RunLogEntry:
        return RunLogEntry(run, "exp_1", "email_events", D0, trigger, status, message, DAY0 + at, None)

    ledger = [
        attempt(1, "moved", w1, "canceled", error="destination changed during the window; started over"),
        attempt(2, "moved", w1, "committed", rows=7),
        attempt(3, "broken", w2, "failed", error="access denied"),
    ]
    log = [
        entry("moved", "succeeded", 1),
        entry("broken", "failed", 3, message="access denied (retries at ...)"),
        entry("paused-first", "canceled", 5, trigger="manual", message="export exp_1 is paused"),
        entry("lost", "running", 6),
        entry("later", "succeeded", 9, trigger="export now"),
    ]
    runs = {r.run_id: r for r in summarize(ledger, log)}
    assert (runs["moved"].status, runs["moved"].windows, runs["moved"].rows) == ("succeeded", 1, 7)
    assert runs["moved"].note == RESTARTED_NOTE and runs["moved"].error is None
    assert runs["broken"].status == "failed" and runs["broken"].error == "access denied (retries at ...)"
    paused = runs["paused-first"]
    assert (paused.status, paused.trigger, paused.days, paused.windows) == ("canceled", "manual", (D0,), 0)
    assert runs["lost"].status == "failed" and runs["lost"].error == WORKER_LOST
    assert runs["later"].trigger == "export now" and runs["later"].status == "succeeded"
    assert [r.run_id for r in summarize(ledger, log)][0] == "later"  # newest first


DAGSTER_WORDS = {"SUCCESS": "succeeded", "FAILURE": "failed", "CANCELED": "canceled"}


def cli_history(h: Any, capsys: Any, export_id: str) -> tuple[list[dict[str, Any]], str]:
    """`seqexport history` as a customer runs it: the JSON rows and the table."""
    from seqexport_dagster import cli

    env = env_for(h.world, os.environ[KEYS_ENV])
    capsys.readouterr()
    assert cli.main(["history", export_id, "--json"], env=env, clock=h.world.clock) == 0
    rows = json.loads(capsys.readouterr().out)
    assert cli.main(["history", export_id], env=env, clock=h.world.clock) == 0
    return rows, capsys.readouterr().out


def dagster_status(h: Any, run_id: str) -> str:
    run = h.instance.get_run_by_id(run_id)
    assert run is not None
    return DAGSTER_WORDS[run.status.value]


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from seqexport_dagster_tests.support.dagster_harness import harness

    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(20, 10, 1, 2))
        yield value


@pytest.fixture
def missing_bucket_export(h: Any, moto: Any) -> Any:
    """An hourly export of email_events, created at DAY0, to a bucket that does not exist on moto:
    its run fails with a customer-readable reason and a retry."""
    return create_missing_bucket_export(
        h.world.store,
        moto.endpoint,
        now_ms=DAY0,
        access_key_id="AKIAHISTORYTEST",
        secret_access_key="history-test-secret",
    )


def test_history_through_the_cli_agrees_with_dagster_scheduled_export_now_backfill_manual(h: Any, capsys: Any) -> None:
    """Four triggers, each a real Dagster run on a real instance: the day, the trigger and Dagster's
    run status per run, as `seqexport history` shows them (JSON and the table)."""
    export = h.world.local_export(datasets=("email_events",))
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    scheduled = h.tick().run_ids
    assert len(scheduled) == 1
    h.world.clock.now_ms = DAY0 + HOUR_MS + 30 * MINUTE_MS
    h.world.store.request_export_now(export.id, h.world.clock())
    outcome = h.tick()
    assert len(outcome.run_ids) == 1 and outcome.requested[0].tags.get("seqexport/export-now") == "1"
    assert outcome.requested[0].run_config["ops"]["deliveries"]["config"]["export_now"] == [export.id]
    export_now = outcome.run_ids
    backfill = h.run([export.id], D0, ["email_events"], tags={"dagster/backfill": "bkfl0001"}).run_id
    manual = h.run([export.id], D0, ["email_events"]).run_id

    rows, table = cli_history(h, capsys, export.id)
    by_run = {r["run_id"]: r for r in rows}
    expected = {scheduled[0]: "scheduled", export_now[0]: "export now", backfill: "backfill", manual: "manual"}
    assert set(by_run) == set(expected)
    for run_id, trigger in expected.items():
        row = by_run[run_id]
        assert (row["trigger"], row["days"]) == (trigger, [D0]), row
        assert row["status"] == dagster_status(h, run_id) == "succeeded", row
    assert by_run[scheduled[0]]["windows"] == 1 and by_run[export_now[0]]["windows"] == 1
    header = table.splitlines()[0].split()
    assert header[:6] == ["STARTED", "(UTC)", "DAY", "TRIGGER", "STATUS", "DATASETS"]
    assert table.count(f" {D0} ") == 4 and "export now" in table and "backfill" in table and "manual" in table


def test_history_shows_a_run_canceled_before_its_first_file_and_dagster_says_canceled(h: Any, capsys: Any) -> None:
    """Paused before the run reached it: nothing is written, the run ends canceled in Dagster, and
    history lists it (day, trigger, canceled, why) although the ledger never saw it."""
    export = h.world.local_export(datasets=("email_events", "custom_events"))
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    h.world.store.set_status(export.id, "paused", h.world.clock())
    result = h.run([export.id], D0, ["email_events", "custom_events"])
    assert dagster_status(h, result.run_id) == "canceled"
    assert not h.world.store.ledger(export.id, since_ms=0)

    rows, table = cli_history(h, capsys, export.id)
    assert len(rows) == 1
    row = rows[0]
    assert (row["run_id"], row["status"], row["trigger"], row["days"]) == (result.run_id, "canceled", "manual", [D0])
    assert row["datasets"] == ["custom_events", "email_events"] and row["windows"] == 0
    assert row["error"] == f"export {export.id} is paused; nothing written"
    assert "canceled" in table and "is paused; nothing written" in table


def test_history_shows_a_failed_run_with_its_retry_and_dagster_failed_it_plainly(
    h: Any, missing_bucket_export: Any, capsys: Any
) -> None:
    """A run whose only export fails (its bucket does not exist): Dagster fails the run with the
    customer message first (not a stack trace), the run says when the scheduler retries, and run
    retries are off for it (no "Not retrying since ..."); history shows the same, with the retry."""
    from seqexport_dagster.delivery.idle import retry_note

    export = missing_bucket_export
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    outcome = h.tick()
    (run_id,) = outcome.run_ids
    assert dagster_status(h, run_id) == "failed"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1
    retry = retry_note(state)
    assert retry.startswith("retries at ") and retry.endswith("(attempt 2)")

    failure = next(e for e in outcome.results[0].all_events if e.event_type_value == "STEP_FAILURE")
    data = failure.step_failure_data
    # ExportFailed: the customer message first, then the next retry; no stack trace, and no wrapper
    # of Dagster's around it (`defs.run_failure`).
    cause = data.error
    assert cause.stack == [] and cause.cause is None
    first = cause.message.splitlines()[0]
    assert first.startswith("ExportFailed: ") and "does not exist" in first and "Traceback" not in first, first
    assert retry in cause.message
    run = h.instance.get_run_by_id(run_id)
    assert run is not None
    assert run.tags["seqexport/retry"] == retry and "does not exist" in run.tags["seqexport/error"]
    assert run.tags["dagster/max_retries"] == "0"
    assert "history-test-secret" not in str(run.tags) + cause.message

    rows, table = cli_history(h, capsys, export.id)
    (row,) = rows
    assert (row["run_id"], row["status"], row["trigger"], row["days"]) == (run_id, "failed", "scheduled", [D0])
    assert "does not exist" in row["error"] and row["error"].endswith(f"({retry})")
    assert "failed" in table and "scheduled" in table


def test_a_batch_with_one_failing_export_succeeds_and_shows_the_failure_on_the_run(
    h: Any, missing_bucket_export: Any, capsys: Any
) -> None:
    """One run, two exports, one failing: the run succeeds (the other delivered), its observations
    name the failing export with its message and next retry; each history shows its own outcome."""
    good = h.world.local_export(datasets=("email_events",))
    bad = missing_bucket_export
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    (run_id,) = h.tick().run_ids
    assert dagster_status(h, run_id) == "succeeded"
    (observed,) = [o.asset_observation.metadata for o in h.observations("email_events")]
    assert observed["exports"].value == 2 and observed["exports_failed"].value == 1
    (line,) = observed["failed"].value.splitlines()
    assert line.startswith(f"{bad.id} (account ") and "does not exist" in line
    assert "(retries at " in line and "(attempt 2))" in line
    assert cli_history(h, capsys, good.id)[0][0]["status"] == "succeeded"
    assert cli_history(h, capsys, bad.id)[0][0]["status"] == "failed"


def test_a_run_terminated_in_dagster_mid_run_is_canceled_in_history_too(h: Any, capsys: Any) -> None:
    """The operator terminates the run after its first window (Dagster marks it canceling and
    interrupts the step, as the UI's Terminate does): Dagster says canceled, and so does history,
    for a dataset whose first window landed and for one the run never reached."""
    import dagster as dg

    from seqexport_dagster.defs.resources import ExporterResource
    from seqexport_dagster.delivery.batch import BatchRunner

    instance = h.instance

    relayed = threading.Event()

    class Terminated(BatchRunner):
        """Terminates the run when its first window is relayed; the worker holds every file written
        after that window committed (its parts and its manifest come first) until then, so the
        termination lands mid-run (as an operator's would, on a longer run)."""

        def _renew(self, export_id: str) -> None:
            committed = [w for w in self.store.ledger(export_id) if w.status == "committed"]
            if committed:
                assert relayed.wait(10)
                deadline = time.monotonic() + 10
                while export_id not in self._revoked and time.monotonic() < deadline:
                    time.sleep(0.01)
            super()._renew(export_id)

        def run(self, *args: Any, **kwargs: Any) -> Any:
            def on_window(export_id: str, report: Any) -> None:
                run = instance.get_run_by_id(self.holder)
                instance.report_run_canceling(run, message="terminated from the UI")
                relayed.set()
                raise dg.DagsterExecutionInterruptedError("terminated")

            kwargs["on_window"] = on_window
            return super().run(*args, **kwargs)

    class TerminatingExporter(ExporterResource):
        def batch(self, *, holder: str, **kwargs: Any) -> BatchRunner:
            return Terminated(
                self.runner, self.control_plane.store(), self.leases(), holder=holder, clock=self.clock.now_ms,
                workers=1, **{k: v for k, v in kwargs.items() if k != "workers"},
            )  # fmt: skip

    export = h.world.local_export(datasets=("email_events", "sms_events"))
    h.world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    h.exporter_class = TerminatingExporter
    (result,) = h.tick().results
    assert dagster_status(h, result.run_id) == "canceled"
    rows, table = cli_history(h, capsys, export.id)
    (row,) = rows
    assert (row["run_id"], row["status"], row["trigger"], row["days"]) == (result.run_id, "canceled", "scheduled", [D0])
    assert row["error"] == "the run was canceled in Dagster before it finished"
    assert row["windows"] == 1, "the window that landed before the termination counts as delivered"
    assert "canceled" in table


def test_a_run_canceled_while_queued_appears_in_history_as_canceled(h: Any, capsys: Any) -> None:
    """Canceled in Dagster before it started (queued, then Terminate): no code of ours ran, so the
    run-status sensor writes the run log from the run's config and tags; history shows it."""
    import dagster as dg

    from seqexport_dagster.defs.run_log_sensors import run_log_canceled_sensor
    from seqexport_dagster.defs.sensors import run_request
    from seqexport_dagster.delivery.planner import batch, due_work

    export = h.world.local_export(datasets=("email_events",))
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    (work,) = batch(due_work(h.world.store.list_exports(), h.world.clock()))
    request = run_request(work)
    job = h.definitions().resolve_job_def("export_job")
    run = h.instance.create_run_for_job(
        job_def=job,
        run_config=request.run_config,
        tags={**request.tags, "dagster/partition": request.partition_key},
        asset_selection=frozenset(request.asset_selection or []),
        status=dg.DagsterRunStatus.NOT_STARTED,  # queued needs a code-server origin; the same for us
    )
    event = h.instance.report_run_canceled(run)
    canceled = h.instance.get_run_by_id(run.run_id)
    assert canceled is not None and dagster_status(h, run.run_id) == "canceled"
    with dg.build_run_status_sensor_context(
        sensor_name=run_log_canceled_sensor.name,
        dagster_event=event,
        dagster_instance=h.instance,
        dagster_run=canceled,
        resources=h.resources(),
    ) as context:
        run_log_canceled_sensor(context)
        run_log_canceled_sensor(context)  # at most once per run

    rows, table = cli_history(h, capsys, export.id)
    (row,) = rows
    assert (row["run_id"], row["status"], row["trigger"], row["days"]) == (run.run_id, "canceled", "scheduled", [D0])
    assert row["datasets"] == ["email_events"] and row["windows"] == 0
    assert row["error"] == "the run was canceled in Dagster before it finished"


def test_a_cli_backfill_is_a_backfill_in_history(run_sqlite: Any) -> None:
    """`seqexport backfill` runs without Dagster; history still shows it, as a backfill of its day."""
    w = run_sqlite.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(20, 10, 1, 2))
    export = w.local_export(datasets=("email_events",))
    w.clock.now_ms = DAY0 + 3 * HOUR_MS
    run_sqlite.ok("backfill", "--export", export.id, "--from", D0, "--to", D0)
    (row,) = run_sqlite.ok("history", export.id)
    assert (row["trigger"], row["days"], row["status"]) == ("backfill", [D0], "succeeded")
    assert row["run_id"].startswith("seqexport-backfill-") and row["windows"] >= 1
