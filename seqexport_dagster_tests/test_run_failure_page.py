"""Issue 25, "a failed run's page": what Dagster records for a run failed by `ExportFailed`, read
back from the event log of a real instance (what the run page renders, row by row).

- the step's STEP_FAILURE and the run's RUN_FAILURE each carry ``ExportFailed: <customer message>``,
  the account and "retries at <time> (attempt n)", with an empty stack and no wrapped cause: no stack
  trace on either row (the run-level row used to repeat Dagster's wrapper with Dagster's frames);
- the same for a failing export's status run (``export_status``);
- a bug of ours (any other exception) still fails the run with its stack trace, on the run's row too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster_tests.support.missing_bucket import missing_bucket_export
from seqexport_dagster_tests.support.world import DAY0


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from seqexport_dagster_tests.support.dagster_harness import harness

    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(20, 10, 1, 2))
        yield value


def missing_bucket(h: Any, moto: Any) -> Any:
    return missing_bucket_export(
        h.world.store,
        moto.endpoint,
        now_ms=DAY0,
        access_key_id="AKIARUNPAGETEST",
        secret_access_key="run-page-test-secret",
    )


def failures(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """The run's STEP_FAILURE and RUN_FAILURE errors, from the stored event log."""
    found: dict[str, Any] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            found["step"] = event.step_failure_data.error
        elif event.event_type == dg.DagsterEventType.RUN_FAILURE:
            found["run"] = event.job_failure_data.error
    assert set(found) == {"step", "run"}, found
    return found


def assert_message_only(error: Any, *words: str) -> None:
    """What the run page shows for an error: its message, then "Stack Trace:" if it has a stack,
    then each cause. Only the message here."""
    assert error.message.startswith("ExportFailed: "), error.message
    assert error.stack == [] and error.cause is None and error.context is None, str(error)
    assert "Stack Trace" not in str(error) and "Traceback" not in str(error)
    for word in words:
        assert word in error.message, (word, error.message)


def test_a_failed_run_shows_the_message_and_retry_without_a_stack_on_the_step_and_the_run(h: Any, moto: Any) -> None:
    from seqexport_dagster.delivery.idle import retry_note

    export = missing_bucket(h, moto)
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    outcome = h.tick()
    (run_id,) = outcome.run_ids
    run = h.instance.get_run_by_id(run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1
    retry = retry_note(state)
    assert retry.startswith("retries at ") and retry.endswith("(attempt 2)")
    found = failures(h.instance, run_id)
    for error in found.values():
        assert_message_only(error, "does not exist", retry, f"Export {export.id} (account acme)")
    assert found["run"] == found["step"]
    assert "run-page-test-secret" not in str(found)

    # The next tick's status run fails the export's export_status partition, saying why, plainly.
    outcome = h.tick()
    (status,) = outcome.status_results
    assert not status.success
    found = failures(h.instance, status.run_id)
    for error in found.values():
        assert_message_only(error, "does not exist", f"Export {export.id} (account acme) is failing", "retries at ")


def test_a_bug_of_ours_still_shows_its_stack_trace_on_the_run(
    h: Any, moto: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seqexport_dagster.defs import assets

    h.world.local_export(datasets=("email_events",), frequency="1h", lag_ms=2 * MINUTE_MS)
    h.world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(assets, "summary_observation", broken)
    outcome = h.tick()
    (result,) = outcome.results
    assert not result.success
    found = failures(h.instance, result.run_id)
    for error in found.values():
        # Dagster's wrapper, then our exception with the frames that raised it.
        assert error.cause is not None and error.cause.message.startswith("KeyError: 'a bug of ours'"), str(error)
        assert any("defs/assets.py" in line for line in error.cause.stack), error.cause.stack
        assert "Stack Trace" in str(error)
    assert found["run"] == found["step"]
