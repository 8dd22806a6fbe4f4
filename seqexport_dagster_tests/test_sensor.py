"""The scheduler sensor on a real instance with frozen time: due windows, lag, backoff, pause, export now, day cells."""

from __future__ import annotations

import dagster as dg
import pytest
import sqlalchemy as sa

from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.store import CANCELED, COMMITTED
from seqexport_dagster.store.lease import LEASE_TTL_MS, Leases
from seqexport_dagster.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, chain
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.local_bucket import bucket_rows
from seqexport_dagster_tests.support.world import DAY0

EVENTS = ("email_events", "sms_events", "custom_events")
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
    assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [[export.id]]

    h.world.clock.now_ms = DAY0 + HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    assert outcome.registered == [export.id]
    assert h.instance.get_dynamic_partitions("exports") == [export.id]
    (request,) = outcome.requested
    assert request.partition_key == "2026-09-30"
    assert sorted(k.path[-1] for k in request.asset_selection) == sorted(EVENTS)
    # Tags name the export and the account (so the Runs page filters by either), nothing else.
    assert request.tags == {
        f"export/{export.id}": "yes",
        "account/acme": "yes",
        "seqexport/exports": "1",
        "seqexport/trigger": "scheduler",
    }
    assert request.run_config == {"ops": {"deliveries": {"config": {"exports": [export.id]}}}}
    assert [r.success for r in outcome.results] == [True]
    for dataset in EVENTS:
        windows = h.world.store.committed_windows(export.id, dataset, "2026-09-30")
        assert windows == [Window(DAY0, DAY0 + HOUR_MS)]
    # The day is still open: windows are observed (naming the export), the day is not materialized.
    (obs, *_) = h.observations("email_events")
    assert obs.asset_observation.metadata["export_id"].value == export.id
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
    # The next tick sees every export's day finished and turns the day green, with totals.
    h.tick()
    (mat,) = h.materializations("email_events")
    assert mat.asset_materialization.partition == "2026-09-30"
    assert mat.run_id == "", "a runless materialization, reported by the sensor"
    meta = mat.asset_materialization.metadata
    assert meta["exports_complete"].value == 1 and meta["windows"].value == 2  # catch-up, then 18:00-24:00
    assert meta["rows"].value == h.world.source.count_window("email_events", "acme", Window(DAY0, DAY0 + DAY_MS))
    assert meta["files"].value == 2 and meta["bytes"].value > 0
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
        # status and the history agree), leading with the customer's message.
        assert not result.success
        (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "cannot write" in failure.step_failure_data.user_failure_data.description.splitlines()[0]
        state = h.world.store.get_export(export.id).dataset_state("email_events")
        assert state.last_error and "cannot write" in state.last_error
        waits.append((state.next_retry_at - h.world.clock()) // MINUTE_MS)
        # Not a millisecond early...
        h.world.clock.now_ms = state.next_retry_at - 1
        assert not h.tick(execute=False).requested
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
    assert sorted(h.instance.get_dynamic_partitions("exports")) == sorted([paused.id, deleted.id])


def test_the_check_and_the_status_asset_name_the_failing_export_and_its_error(h):
    good = h.world.local_export(datasets=("email_events",), folder="good")
    (h.world.root / "blocked").write_text("a file where the bucket folder should be")
    bad = h.world.local_export(account_id="globex", datasets=("email_events",), folder="blocked")
    h.world.clock.now_ms = DAY0 + 2 * HOUR_MS + 2 * MINUTE_MS
    outcome = h.tick()
    assert [r.success for r in outcome.results] == [True], "one batch; the failing export does not fail it"
    # UI launches select the check: the run itself evaluates it too.
    (check,) = [e for e in outcome.results[0].all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"][:1]
    assert not check.event_specific_data.passed
    events = h.tick(execute=False).asset_events
    checks = {e.asset_key.path[-1]: e for e in events if isinstance(e, dg.AssetCheckEvaluation)}
    failed = checks["email_events"]
    assert not failed.passed and failed.metadata["failing_exports"].value == 1
    assert bad.id in failed.description and "globex" in failed.description and "cannot write" in failed.description
    assert good.id not in failed.description
    assert checks["sms_events"].passed
    status = {
        e.partition: e.metadata
        for e in events
        if isinstance(e, dg.AssetMaterialization) and e.asset_key.path[-1] == "export_status"
    }
    meta = {k: v.value for k, v in status[bad.id].items()}
    assert meta["account"] == "globex" and meta["health"] == "failing" and meta["failures"] == 1
    assert "email_events: " in meta["last_error"] and "cannot write" in meta["last_error"]
    assert meta["next_retry"] == "2026-09-30T03:02:00.000Z" and meta["position"] == "2026-09-30T00:00:00.000Z"
    assert meta["behind_minutes"] == 122  # now − position, as `seqexport status` shows it
    meta = {k: v.value for k, v in status[good.id].items()}
    assert meta["health"] == "ok" and meta["last_error"] == "-" and meta["behind_minutes"] == 2
    # Unchanged exports are not re-recorded on every tick; a fixed one passes the check again.
    assert not [e for e in h.tick(execute=False).asset_events if isinstance(e, dg.AssetMaterialization)]
    (h.world.root / "blocked").unlink()
    h.world.store.request_export_now(bad.id, h.world.clock())
    h.tick()
    events = h.tick(execute=False).asset_events
    assert all(e.passed for e in events if isinstance(e, dg.AssetCheckEvaluation))
    assert any(isinstance(e, dg.AssetCheckEvaluation) for e in events)
