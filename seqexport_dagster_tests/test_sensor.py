"""The scheduler sensor on a real instance with frozen time: due windows, lag, backoff, pause, export now, day cells."""

from __future__ import annotations

import dagster as dg
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, chain
from seqexport_dagster.defs.export_status import MAX_STATUS_RUNS_PER_TICK
from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.defs.sensors import (
    MAX_STATUS_PER_TICK,
    Cursor,
    short_id,
    status_events,
    status_key,
)
from seqexport_dagster.defs.status_refresh import REFRESH_EVERY_TICKS, SLOTS, refresh_due, slot_of
from seqexport_dagster.delivery import planner
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.store import CANCELED, COMMITTED, DatasetState, ExportRecord
from seqexport_dagster.store.lease import LEASE_TTL_MS, Leases
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.event_log import committed_windows, event_log_size
from seqexport_dagster_tests.support.local_bucket import bucket_rows
from seqexport_dagster_tests.support.processes import ROOT
from seqexport_dagster_tests.support.world import DAY0

EVENTS = ("email_events", "sms_events", "custom_events")
ARTEFACTS = ROOT / "test-artefacts"
SMALL = Scale(subscribers=60, email_sends_per_hour=12, sms_sends_per_hour=4, custom_per_hour=6)


@pytest.fixture
def h(tmp_path, monkeypatch):
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + 2 * DAY_MS, scale=SMALL)
        yield value


def assert_chain(h: Harness, export_id: str, dataset: str, start: int, end: int) -> None:
    """Committed windows form one unbroken chain from start to end, and the bucket holds each row once."""
    committed = sorted({w.window for w in h.world.store.ledger(export_id, dataset=dataset) if w.status == COMMITTED})
    assert committed[0].from_ms == start and committed[-1].to_ms == end
    assert all(a.to_ms == b.from_ms for a, b in zip(committed, committed[1:], strict=False))
    rows = bucket_rows(h.world.root / "bucket", dataset)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row appears twice in the bucket"
    expected = sum(h.world.source.count_window(dataset, "acme", w) for w in chain(start, end))
    assert len(ids) == expected > 0


def test_registers_exports_and_waits_for_the_lag(h):
    export = h.world.local_export(frequency="1h", lag_ms=2 * MINUTE_MS)
    h.world.clock.now_ms = DAY0 + HOUR_MS + 2 * MINUTE_MS - 1
    result = h.sensor_result()
    assert not result.run_requests
    # Its status partition names its account (issue 42).
    assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [[f"acme/{export.id}"]]

    h.world.clock.now_ms = DAY0 + HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    assert outcome.registered == [f"acme/{export.id}"]
    assert h.instance.get_dynamic_partitions("exports") == [f"acme/{export.id}"]
    (request,) = outcome.requested
    assert request.partition_key == "2026-09-30"
    assert sorted(k.path[-1] for k in request.asset_selection) == sorted(EVENTS)
    # Tags name the export, the account and the shard (so the Runs page filters by any), nothing else.
    assert request.tags == {
        f"export/{export.id}": "yes",
        "account/acme": "yes",
        f"shard/{planner.shard_of(export.id)}": "yes",
        "seqexport/exports": "1",
        "seqexport/accounts": "1",
        "seqexport/trigger": "scheduler",
    }
    assert request.run_config == {"ops": {"deliveries": {"config": {"exports": [export.id]}}}}
    assert [r.success for r in outcome.results] == [True]
    for dataset in EVENTS:
        windows = h.world.store.committed_windows(export.id, dataset, "2026-09-30")
        assert windows == [Window(DAY0, DAY0 + HOUR_MS)]
    # The day is still open: the run observed what it delivered (one event per dataset, not per
    # window), the day is not materialized.
    (obs,) = h.observations("email_events")
    meta = obs.asset_observation.metadata
    assert meta["exports"].value == 1 and meta["windows"].value == 1 and meta["exports_failed"].value == 0
    assert meta["rows"].value == h.world.source.count_window("email_events", "acme", Window(DAY0, DAY0 + HOUR_MS))
    assert meta["failed"].value == "-"
    # Sizes carry their unit in the name (issue 42: the UI showed a bare "bytes 23320").
    assert meta["size_bytes"].value > 0 and "bytes" not in meta
    assert obs.asset_observation.partition == "2026-09-30"
    assert not h.materializations("email_events")

    # Same minute again: nothing new is due, nothing runs twice.
    assert not h.tick().requested
    h.world.clock.advance(HOUR_MS - 1)
    assert not h.tick().requested


def test_snapshot_waits_for_day_end_plus_lag_and_the_sensor_completes_the_day(h):
    export = h.world.local_export(frequency="6h", lag_ms=5 * MINUTE_MS)
    h.world.clock.now_ms = DAY0 + DAY_MS + 5 * MINUTE_MS - 1
    outcome = h.tick()
    (request,) = outcome.requested
    assert "subscribers" not in {k.path[-1] for k in request.asset_selection}

    h.world.clock.now_ms = DAY0 + DAY_MS + 5 * MINUTE_MS
    outcome = h.tick()
    (request,) = outcome.requested
    assert {k.path[-1] for k in request.asset_selection} == {*EVENTS, "subscribers"}
    assert outcome.results[0].success
    assert (h.world.root / "bucket" / "subscribers" / "date=2026-09-30" / "_SUCCESS").exists()
    # The next tick sees every export's day finished and turns the day green, with totals, in a
    # small run of its own that targets the day (`defs.day_cells`), all datasets of the day in one.
    cells = h.tick()
    (cell_run,) = cells.cell_results
    assert cell_run.success and cell_run.dagster_run.tags["dagster/partition"] == "2026-09-30"
    assert cell_run.dagster_run.tags["seqexport/trigger"] == "cells"
    (mat,) = h.materializations("email_events")
    assert mat.asset_materialization.partition == "2026-09-30"
    assert mat.run_id == cell_run.run_id
    meta = mat.asset_materialization.metadata
    assert meta["exports_complete"].value == 1 and meta["windows"].value == 2  # catch-up, then 18:00-24:00
    assert meta["rows"].value == h.world.source.count_window("email_events", "acme", Window(DAY0, DAY0 + DAY_MS))
    assert meta["files"].value == 2 and meta["size_bytes"].value > 0 and "bytes" not in meta
    (snap,) = h.materializations("subscribers")
    assert snap.asset_materialization.partition == "2026-09-30"
    assert snap.asset_materialization.metadata["exports_complete"].value == 1
    h.tick()
    assert len(h.materializations("email_events")) == 1, "a day turns green once"
    assert export.id


def test_backoff_of_a_15_minute_export_then_export_now_skips_the_wait(h):
    blocked = h.world.root / "blocked"
    blocked.write_text("a file where the bucket folder should be")
    export = h.world.local_export(datasets=("email_events",), frequency="15m", lag_ms=2 * MINUTE_MS, folder="blocked")
    h.world.clock.now_ms = DAY0 + 17 * MINUTE_MS
    waits = []
    for _ in range(8):
        outcome = h.tick()
        (result,) = outcome.results
        # The run carries only this export, so it fails as the export did (issue 17: Dagster's
        # status and the history agree), leading with the customer's message, without a stack.
        assert not result.success
        (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        error = failure.step_failure_data.error
        assert error.message.startswith("ExportFailed: cannot write") and error.stack == [] and error.cause is None
        assert "(account acme)" in error.message
        state = h.world.store.get_export(export.id).dataset_state("email_events")
        assert state.last_error and "cannot write" in state.last_error
        waits.append((state.next_retry_at - h.world.clock()) // MINUTE_MS)
        # Not a millisecond early...
        h.world.clock.now_ms = state.next_retry_at - 1
        assert not [r for r in h.tick(execute=False).requested if r.job_name == "export_job"]
        h.world.clock.now_ms = state.next_retry_at
    assert waits == [15, 30, 60, 120, 240, 360, 360, 360]
    # A permanent error is not retried inside the run: one failed attempt per run.
    assert [w.status for w in h.world.store.ledger(export.id)] == ["failed"] * 8

    # The customer fixes the bucket and presses "export now" mid-wait: the next tick runs it.
    blocked.unlink()
    h.world.clock.advance(MINUTE_MS)
    h.world.store.request_export_now(export.id, h.world.clock())
    outcome = h.tick()
    assert [r.success for r in outcome.results] == [True]
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state.failures == 0 and state.last_error is None


class PausingExporter(ExporterResource):
    """Pauses the export after ``pause_after`` files, as a customer pressing pause mid-window."""

    pause_after: int

    def runner(self, **kwargs):
        store = self.control_plane.store()
        puts = {"n": 0}
        pause_after = self.pause_after

        def factory(config, policy):
            destination = open_destination(config, policy)
            real_put = destination.put

            def put(key: str, body: bytes, *, create_only: bool = True):
                outcome = real_put(key, body, create_only=create_only)
                puts["n"] += 1
                if puts["n"] == pause_after:
                    store.set_status(config_export_id(store), "paused", self.clock.now_ms())
                return outcome

            destination.put = put  # type: ignore[method-assign]
            return destination

        return super().runner(part_limit=10, destination_factory=factory, **kwargs)


def config_export_id(store) -> str:
    (export,) = store.list_exports()
    return export.id


def test_pause_mid_window_stops_the_export_and_resume_catches_up_without_gap_or_duplicate(h):
    export = h.world.local_export(datasets=("email_events",), frequency="1h", lag_ms=2 * MINUTE_MS)
    h.exporter_class = PausingExporter
    h.exporter_fields = {"pause_after": 2}
    h.world.clock.now_ms = DAY0 + 3 * HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    (result,) = outcome.results
    # A pause stops that export; not a failure: the run, which carried only it, ends canceled.
    assert not result.success
    assert h.instance.get_run_by_id(result.run_id).status.value == "CANCELED"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state.failures == 0 and state.next_retry_at is None and state.position_ms == DAY0
    assert [w.status for w in h.world.store.ledger(export.id)] == [CANCELED]
    assert len(list((h.world.root / "bucket").rglob("*.jsonl.gz"))) == 2
    assert not h.world.store.engine.connect().execute(sa.text("select * from export_leases")).all(), "lease released"

    # Paused: ticks request nothing, however long it stays paused.
    h.exporter_class, h.exporter_fields = ExporterResource, None
    h.world.clock.now_ms = DAY0 + 26 * HOUR_MS
    assert not h.tick().requested

    # Resumed the next day: whole-day catch-up runs, one at a time, in order.
    h.world.store.set_status(export.id, "active", h.world.clock())
    days = []
    for _ in range(4):
        outcome = h.tick()
        if not outcome.requested:
            break
        assert all(r.success for r in outcome.results)
        days.append(outcome.requested[0].partition_key)
    assert days == ["2026-09-30", "2026-10-01"]
    assert_chain(h, export.id, "email_events", DAY0, DAY0 + 25 * HOUR_MS)
    h.tick()
    (mat,) = h.materializations("email_events")  # 09-30 is complete; 10-01 is still open
    assert mat.asset_materialization.partition == "2026-09-30"


def test_a_dataset_added_later_starts_at_its_added_time(h):
    export = h.world.local_export(datasets=("email_events",), frequency="1h")
    added = DAY0 + 5 * HOUR_MS + 30 * MINUTE_MS
    h.world.clock.now_ms = added
    h.world.store.add_dataset(export.id, "sms_events", added)
    h.world.clock.now_ms = DAY0 + 7 * HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    assert {k.path[-1] for k in outcome.requested[0].asset_selection} == {"email_events", "sms_events"}
    assert all(r.success for r in outcome.results)
    sms = h.world.store.committed_windows(export.id, "sms_events", "2026-09-30")
    assert sms[0].from_ms == added and sms[-1].to_ms == DAY0 + 7 * HOUR_MS
    assert h.world.store.committed_windows(export.id, "email_events", "2026-09-30")[0].from_ms == DAY0


def test_export_now_starts_on_the_next_tick(h):
    export = h.world.local_export(datasets=("email_events",), frequency="1h", lag_ms=2 * MINUTE_MS)
    h.world.clock.now_ms = DAY0 + 40 * MINUTE_MS
    assert not h.tick().requested
    h.world.store.request_export_now(export.id, h.world.clock())
    outcome = h.tick()
    assert [r.success for r in outcome.results] == [True]
    assert h.world.store.committed_windows(export.id, "email_events", "2026-09-30") == [
        Window(DAY0, DAY0 + 38 * MINUTE_MS)
    ]
    assert h.world.store.get_export(export.id).export_now_at is None
    # The grid resumes at the next hour.
    h.world.clock.now_ms = DAY0 + HOUR_MS + 2 * MINUTE_MS
    h.tick()
    assert h.world.store.committed_windows(export.id, "email_events", "2026-09-30")[-1] == Window(
        DAY0 + 38 * MINUTE_MS, DAY0 + HOUR_MS
    )


def test_exports_with_a_run_in_flight_or_a_live_lease_are_not_requested_again(h):
    busy = h.world.local_export(folder="b1")
    leased = h.world.local_export(folder="b2")
    idle = h.world.local_export(account_id="acme", folder="b3")
    job = h.definitions().resolve_job_def("export_job")
    h.instance.create_run_for_job(job_def=job, tags={f"export/{busy.id}": "yes"}, status=dg.DagsterRunStatus.STARTED)
    h.world.clock.now_ms = DAY0 + 2 * HOUR_MS
    leases = Leases(h.world.store.engine)
    assert leases.claim(leased.id, "a-ui-launch", h.world.clock())
    (request,) = h.tick(execute=False).requested
    assert request.run_config["ops"]["deliveries"]["config"]["exports"] == [idle.id]
    # The lease lapses (its holder died): the export is planned again.
    h.world.clock.advance(LEASE_TTL_MS)
    h.world.clock.advance(15 * MINUTE_MS)
    (request,) = h.tick(execute=False).requested
    assert sorted(request.run_config["ops"]["deliveries"]["config"]["exports"]) == sorted([idle.id, leased.id])


def test_paused_and_deleted_exports_are_not_scheduled_but_keep_their_partitions(h):
    paused = h.world.local_export(folder="p")
    deleted = h.world.local_export(folder="d")
    h.world.clock.now_ms = DAY0 + 2 * HOUR_MS
    (request,) = h.tick(execute=False).requested
    assert request.tags["seqexport/exports"] == "2"
    h.world.store.set_status(paused.id, "paused", h.world.clock())
    h.world.store.set_status(deleted.id, "deleted", h.world.clock())
    assert not h.tick(execute=False).requested
    assert sorted(h.instance.get_dynamic_partitions("exports")) == sorted([f"acme/{paused.id}", f"acme/{deleted.id}"])


def test_the_check_and_the_status_asset_name_the_failing_export_and_its_error(h):
    good = h.world.local_export(datasets=("email_events",), folder="good")
    (h.world.root / "blocked").write_text("a file where the bucket folder should be")
    bad = h.world.local_export(account_id="globex", datasets=("email_events",), folder="blocked")
    h.world.clock.now_ms = DAY0 + 2 * HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    assert [r.success for r in outcome.results] == [True], "one batch; the failing export does not fail it"
    # The run's observation names the failed export, its account, the message and the next retry.
    (obs,) = h.observations("email_events")
    meta = obs.asset_observation.metadata
    assert meta["exports"].value == 2 and meta["exports_failed"].value == 1
    assert f"{bad.id} (account globex): cannot write" in meta["failed"].value
    assert "retries at 2026-09-30T03:02:00.000Z (attempt 2)" in meta["failed"].value
    assert good.id not in meta["failed"].value
    # UI launches select the check: the run itself evaluates it too.
    (check,) = [e for e in outcome.results[0].all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"][:1]
    assert not check.event_specific_data.passed
    second = h.tick()
    events = second.asset_events
    # The export started failing: one status run, for its partition, fails (red) saying why.
    (status_run,) = second.status_results
    assert not status_run.success and not second.results
    assert status_run.dagster_run.tags["dagster/partition"] == f"globex/{bad.id}"
    assert status_run.dagster_run.tags["account/globex"] == "yes"
    (failure,) = [e for e in status_run.all_events if e.event_type_value == "STEP_FAILURE"]
    cause = failure.step_failure_data.error
    assert (
        cause.stack == []
        and cause.cause is None
        and "cannot write" in cause.message
        and f"Export {bad.id} (account globex)" in cause.message
    )
    checks = {e.asset_key.path[-1]: e for e in events if isinstance(e, dg.AssetCheckEvaluation)}
    assert checks["export_status"].check_name == "no_failing_exports"
    failed = checks["email_events"]
    assert not failed.passed and failed.metadata["failing_exports"].value == 1
    assert bad.id in failed.description and "globex" in failed.description and "cannot write" in failed.description
    assert good.id not in failed.description
    assert checks["sms_events"].passed
    # export_status's own check names the failing export with its account, on the asset's page.
    (own,) = [e for e in events if isinstance(e, dg.AssetCheckEvaluation) and e.asset_key.path[-1] == "export_status"]
    assert not own.passed and f"{bad.id} (account globex, 1 failure(s)): email_events: cannot write" in own.description
    # Registered by the first tick, each export's partition is recorded by the second with a
    # materialization (green from the start); the failing one then turns red by its status run.
    status = {
        e.partition: e.metadata
        for e in events
        if isinstance(e, dg.AssetMaterialization) and e.asset_key.path[-1] == "export_status"
    }
    assert set(status) == {f"acme/{good.id}", f"globex/{bad.id}"}
    assert "on schedule" in status[f"acme/{good.id}"]["behind email_events"].value
    meta = {k: v.value for k, v in status[f"globex/{bad.id}"].items()}
    assert meta["account"] == "globex" and meta["health"] == "failing" and meta["failures"] == 1
    assert "email_events: " in meta["last_error"] and "cannot write" in meta["last_error"]
    assert meta["next_retry"] == "2026-09-30T03:02:00.000Z" and meta["position"] == "2026-09-30T00:00:00.000Z"
    assert meta["behind_minutes"] == 122  # now − position, as `seqexport status` shows it
    # Per dataset, in words, with the time it was taken (issue 42).
    assert meta["behind email_events"] == (
        "failing (attempt 1); 2 h 02 min behind at 02:02Z (updated as it doubles); delivered through 2026-09-30T00:00Z"
    )
    assert meta["runs_tag"] == f"shard/{planner.shard_of(bad.id)}=yes"
    # Unchanged exports are not re-recorded on every tick; a fixed one passes the check again.
    assert not [e for e in h.tick(execute=False).asset_events if isinstance(e, dg.AssetObservation)]
    (h.world.root / "blocked").unlink()
    h.world.store.request_export_now(bad.id, h.world.clock())
    h.tick()
    fixed = h.tick()
    assert all(e.passed for e in fixed.asset_events if isinstance(e, dg.AssetCheckEvaluation))
    assert any(isinstance(e, dg.AssetCheckEvaluation) for e in fixed.asset_events)
    # Its status run materializes its partition: green again, with its status.
    assert [r.success for r in fixed.status_results] == [True]
    greens = [m for m in h.materializations("export_status") if m.asset_materialization.partition == f"globex/{bad.id}"]
    green = max(greens, key=lambda m: m.timestamp)
    assert len(greens) == 2  # its first record, and this one
    assert green.asset_materialization.metadata["health"].value == "ok"


def test_event_log_grows_per_run_not_per_window(h: Harness, tmp_path) -> None:
    """Issue 23: 12 exports at 15 minutes for 3 hours. Dagster's event log holds a fixed number of
    rows per run (one observation per dataset, whatever the number of exports in it), not one per
    export-window; the per-window detail is the control plane's. Figures printed for the report."""
    for i in range(12):
        h.world.local_export(f"acct{i % 4}", frequency="15m", lag_ms=MINUTE_MS, folder=f"bucket{i}")
    runs = []
    for _ in range(12):
        h.world.clock.advance(15 * MINUTE_MS)
        outcome = h.tick()
        assert all(r.success for r in outcome.results)
        runs += outcome.results
    windows = committed_windows(h.world.control_engine)
    size = event_log_size(tmp_path / "dagster_home")
    assert windows == 12 * 11 * len(EVENTS)  # each export's quarter-hours due by the last tick, per dataset
    figures = (
        f"event_logs: {size.rows} rows, {size.bytes} bytes for {windows} export-windows in {len(runs)} runs: "
        f"{size.rows / windows:.3f} rows and {size.bytes / windows:.0f} bytes per export-window; "
        f"{size.rows / len(runs):.1f} rows per run; {size.by_type}\n"
    )
    ARTEFACTS.mkdir(exist_ok=True)
    (ARTEFACTS / "event_log_per_run.txt").write_text(figures)
    # One observation per run and dataset, plus the sensor's status observations (new exports).
    observations = [o for d in EVENTS for o in h.observations(d)]
    assert len(observations) == len(runs) * len(EVENTS)
    assert {o.asset_observation.metadata["exports"].value for o in observations} == {12}
    assert sum(o.asset_observation.metadata["windows"].value for o in observations) == windows
    # Before: one observation per export-window (1.96 rows, 4.0 KB each here); now a run's rows do
    # not depend on its exports (these runs carry 12; a full run 50).
    assert size.rows / len(runs) < 40 and size.rows / windows < 1


def fleet(n: int, failing: set[int]) -> list[ExportRecord]:
    """n exports as the control plane lists them; those in ``failing`` have failed once."""
    return [
        ExportRecord(
            id=f"exp_{i:06d}", account_id=f"acct{i % 97}", provider="local", bucket="b", region=None, endpoint=None,
            prefix="", access_key_id=None, frequency="15m", lag_ms=MINUTE_MS, status="active", config_version=1,
            destination_version=1, export_now_at=None, created_at=DAY0, updated_at=DAY0, deleted_at=None,
            datasets=(DatasetState("email_events", DAY0, DAY0, failures=int(i in failing),
                                   last_error="no such bucket" if i in failing else None),),
        )
        for i in range(n)
    ]  # fmt: skip


def test_status_output_per_tick_is_bounded_at_10000_exports_and_each_is_refreshed_every_6_hours() -> None:
    """Issue 29: the daemon stores a tick's asset events one by one (30-100 ms each), so a tick
    records at most 100 status observations and 20 status runs, whatever the number of exports and
    of changes; a change left over is recorded on a later tick. Issue 23: an unchanged export is
    never recorded by the sensor (a runless event is never deleted); one refresh run an hour
    covers a sixth of the exports, so each is refreshed once every 6 hours, in a run."""
    records = fleet(10_000, failing=set(range(0, 10_000, 40)))  # 250 start failing at once
    cursor = Cursor()
    runs: set[str] = set()
    for _ in range(20):
        observations, requests, _ = status_events(records, cursor, DAY0, new=set(), changed=set())
        assert len(observations) <= MAX_STATUS_PER_TICK and len(requests) <= MAX_STATUS_RUNS_PER_TICK
        runs |= {r.partition_key for r in requests}
        cursor.tick += 1
    # The 250 changes are all recorded (each with its status run: red) in spite of the caps.
    assert runs == {f"acct{i % 97}/exp_{i:06d}" for i in range(0, 10_000, 40)}
    assert len(cursor.unwell) == 250 and len(cursor.dump()) < 10_000
    # Nothing changed: the next tick records nothing, and launches nothing.
    assert status_events(records, cursor, DAY0, new=set(), changed=set()) == ([], [], [])
    # Over 6 hours of ticks (30 s), 6 refresh runs, one a slice, cover each export exactly once.
    slots = [refresh_due(t) for t in range(SLOTS * REFRESH_EVERY_TICKS)]
    assert sorted(s for s in slots if s is not None) == list(range(SLOTS)) and slots[0] is None
    small = fleet(2_000, failing=set())
    sizes = [sum(1 for e in small if slot_of(e.id) == k) for k in range(SLOTS)]
    assert sum(sizes) == 2_000 and min(sizes) > 250, f"slices of 2,000 exports: {sizes}"


def test_the_cursor_leads_with_its_words_and_reads_the_previous_versions_json() -> None:
    cursor = Cursor({"email_events": "2026-09-29"}, 5, 3, "ab", "nothing due", {"0badf00d": "active:2"})
    text = cursor.dump()
    assert text.startswith("nothing due | {")
    assert Cursor.parse(text) == Cursor({"email_events": "2026-09-29"}, 5, 3, "ab", "", {"0badf00d": "active:2"})
    # An upgrade: the previous version's cursor (JSON, "why" first) keeps the days already green.
    old = '{"why": "1 run(s) requested", "through": {"email_events": "2026-09-29"}, "since_ms": 5, "tick": 3, "failing": "ab"}'
    assert Cursor.parse(old) == Cursor({"email_events": "2026-09-29"}, 5, 3, "ab")
    assert Cursor.parse("not json | {broken") == Cursor()


def test_bare_id_partitions_are_renamed_by_account_and_a_failing_export_stays_red(h):
    """Issue 42's upgrade: partitions named by bare export ids (the previous version's) are replaced
    by ``<account>/<export id>``; the new partition is recorded the next tick, green, or red through
    a status run for an export failing across the rename, whatever the sensor's cursor remembers."""
    good = h.world.local_export(datasets=("email_events",), folder="good")
    (h.world.root / "blocked").write_text("a file where the bucket folder should be")
    bad = h.world.local_export(account_id="globex", datasets=("email_events",), folder="blocked")
    h.instance.add_dynamic_partitions("exports", [good.id, bad.id])
    h.world.clock.now_ms = DAY0 + 2 * HOUR_MS + 2 * MINUTE_MS
    first = h.tick()
    assert sorted(first.registered) == sorted([f"acme/{good.id}", f"globex/{bad.id}"])
    assert sorted(h.instance.get_dynamic_partitions("exports")) == sorted(first.registered)
    # The previous version's cursor already knew the export was failing.
    cursor = Cursor.parse(h.cursor)
    cursor.unwell[short_id(bad.id)] = status_key(h.world.store.get_export(bad.id), h.world.clock())
    h.cursor = cursor.dump()
    second = h.tick()
    recorded = {e.partition for e in second.asset_events if isinstance(e, dg.AssetMaterialization)}
    assert recorded == set(first.registered)
    (red,) = second.status_results
    assert not red.success and red.dagster_run.tags["dagster/partition"] == f"globex/{bad.id}"
