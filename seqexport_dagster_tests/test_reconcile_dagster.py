"""Reconciliation in production: the scheduled runs of the event assets deliver late rows.

Driven through Dagster (real sensor, real instance, in-process runs) into a real moto bucket, and
checked with `bucket_audit`: every source row present, no duplicate, the windows chained, late rows
appended as additional parts of their window, and no file ever replaced.
"""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.definitions import build_definitions
from seqexport_dagster.defs.resources import ExporterResource, OperatorResource
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.demo.ticker import tick
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.store import COMMITTED
from seqexport_dagster_tests.support.bucket_audit import audit_export, read_objects
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"
PREFIX = "sequenzy"


@pytest.fixture
def h(tmp_path, monkeypatch):
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + 8 * HOUR_MS, scale=Scale(40, 30, 3, 20))
        yield value


def s3_export(h: Harness, moto: Any) -> str:
    bucket = f"rec-{uuid.uuid4().hex[:12]}"
    moto.admin_client().create_bucket(Bucket=bucket)
    export = h.world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            bucket,
            prefix=PREFIX,
            region="us-east-1",
            endpoint=moto.endpoint,
            access_key_id="AKIARECONCILE",
            secret_access_key="reconcile-secret",
        ),
        datasets=("email_events", "custom_events"),
        frequency="1h",
        lag_ms=2 * MINUTE_MS,
        now_ms=DAY0,
    )
    return export.id


def scheduled_tick(h: Harness, hours: float, lookback_hours: int | None = None) -> list[dg.ExecuteInProcessResult]:
    """The sensor's tick at DAY0 + hours + 3 min, its runs executed; all must succeed."""
    h.world.clock.now_ms = DAY0 + int(hours * HOUR_MS) + 3 * MINUTE_MS
    resources = h.resources()
    if lookback_hours is not None:
        old: ExporterResource = resources["exporter"]
        resources["exporter"] = ExporterResource(
            control_plane=old.control_plane,
            source=old.source,
            operator=OperatorResource(allow_local="1", reconcile_lookback_hours=lookback_hours),
            clock=old.clock,
        )
    outcome = tick(h.instance, build_definitions(resources, first_day=h.first_day()))
    assert outcome.results and all(r.success for r in outcome.results)
    return outcome.results


def late_email_rows(window: Window, n: int, tag: str) -> list[tuple]:
    """Rows whose write became visible long after the ``recorded_at`` they carry (inside ``window``)."""
    return [
        (
            "acme", f"eev_{tag}_{i:04d}", "delivered", iso_ms(window.from_ms + 1000 * i + 1),
            iso_ms(window.from_ms + 1000 * i + 7), "sub_acme_0000001", "late@example.com", None, None,
            f"msg_{tag}_{i}", "Late", None, None, None, None, None,
        )
        for i in range(n)
    ]  # fmt: skip


def erase_custom_events(h: Harness, window: Window, n: int) -> list[str]:
    with h.world.source_engine.begin() as conn:
        ids = [
            r[0]
            for r in conn.execute(
                sa.text(
                    "SELECT id FROM custom_events WHERE account_id='acme' AND recorded_at > :f AND recorded_at <= :t "
                    "ORDER BY recorded_at, id LIMIT :n"
                ),
                {"f": iso_ms(window.from_ms), "t": iso_ms(window.to_ms), "n": n},
            )
        ]
        conn.execute(
            sa.text("DELETE FROM custom_events WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        )
    return ids


def late_custom_rows(window: Window, n: int) -> list[tuple[Any, ...]]:
    return [
        ("acme", f"cev_late_{i:03d}", "trial_started", iso_ms(window.from_ms + 500 + i), iso_ms(window.from_ms + 500 + i),
         "sub_acme_0000001", "late@example.com", "{}")
        for i in range(n)
    ]  # fmt: skip


def reconciled(h: Harness, asset: str) -> list[dg.EventLogRecord]:
    """The runs' observations (one per run and dataset) that report reconciled windows."""
    return [r for r in h.observations(asset) if r.asset_observation.metadata["reconciled_windows"].value]


def test_late_rows_are_appended_by_the_next_scheduled_run_and_no_file_is_replaced(h, moto):
    export_id = s3_export(h, moto)
    s3 = moto.admin_client()
    bucket = h.world.store.destination_config(export_id)[0].bucket
    for hours in (1, 2):
        scheduled_tick(h, hours)
    assert not reconciled(h, "email_events") and not reconciled(h, "custom_events")
    before = set(read_objects(s3, bucket, PREFIX))
    w01, w12 = Window(DAY0, DAY0 + HOUR_MS), Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)

    # 25 email rows appear inside the exported (0h, 1h]. In (1h, 2h] of custom events, 6 rows are
    # erased and 4 appear: the count shrinks, yet the 4 new rows must still be delivered.
    insert_rows(h.world.source_engine, "email_events", late_email_rows(w01, 25, "late"))
    erased = erase_custom_events(h, w12, 6)
    insert_rows(h.world.source_engine, "custom_events", late_custom_rows(w12, 4))
    stale = audit_export(h.world.store, h.world.source_engine, s3, export_id)
    assert stale.datasets["email_events"].missing == 25 and stale.datasets["custom_events"].missing == 4
    previous = {key: body for key, body in read_objects(s3, bucket, PREFIX).items()}

    (run,) = scheduled_tick(h, 3)  # the next scheduled run: writes (2h, 3h], then reconciles
    report = audit_export(h.world.store, h.world.source_engine, s3, export_id)
    # Every row once, chained; the erased rows stay in the files that already carried them.
    report.assert_clean(allow_extra=True)
    assert report.duplicated == 0 and report.missing == 0 and report.extra == len(erased) == 6
    objects = read_objects(s3, bucket, PREFIX)
    assert all(objects[key] == body for key, body in previous.items()), "no file is ever replaced"
    # New names only: the parts of the new window (2h, 3h], and one more part of each late window.
    new = set(objects) - before
    w23 = f"-{DAY0 + 2 * HOUR_MS}-{DAY0 + 3 * HOUR_MS}-"
    appended = sorted(key for key in new if w23 not in key and "/_sequenzy/" not in f"/{key}")
    assert [k.rsplit("/", 1)[1].split("-", 1)[0] for k in appended] == ["custom_events", "email_events"]
    assert f"-{w01.from_ms}-{w01.to_ms}-" in appended[1] and f"-{w12.from_ms}-{w12.to_ms}-" in appended[0]
    # Each late window also got a new manifest, under a new name (the earlier one stays as it was).
    manifests = sorted(key for key in new if w23 not in key and key.startswith("_sequenzy/manifests/"))
    assert len(manifests) == 2
    assert (
        f"-{w12.from_ms}-{w12.to_ms}-through-" in manifests[0]
        and f"-{w01.from_ms}-{w01.to_ms}-through-" in manifests[1]
    )

    # The operator sees the rewrites in the run's observation of each dataset (the windows are in
    # the control plane's ledger: one more committed attempt each, below).
    (email,) = reconciled(h, "email_events")
    (custom,) = reconciled(h, "custom_events")
    assert email.run_id == custom.run_id == run.run_id
    assert email.asset_observation.partition == D0
    meta = {k: v.value for k, v in email.asset_observation.metadata.items()}
    assert meta["reconciled_windows"] == 1 and meta["late_rows_found"] == 25 and meta["exports"] == 1
    meta = {k: v.value for k, v in custom.asset_observation.metadata.items()}
    assert meta["reconciled_windows"] == 1 and meta["late_rows_found"] == 4
    # Positions never move back; the rewrite is a new committed attempt of the same window.
    state = h.world.store.get_export(export_id)
    assert {s.dataset: s.position_ms for s in state.datasets} == dict.fromkeys(
        ("email_events", "custom_events"), DAY0 + 3 * HOUR_MS
    )
    attempts = [w for w in h.world.store.ledger(export_id, dataset="email_events") if w.window == w01]
    assert [w.status for w in attempts] == [COMMITTED, COMMITTED]

    # Idempotent: the run after that finds nothing new and writes nothing more.
    scheduled_tick(h, 4)
    assert len(reconciled(h, "email_events")) == 1 and len(reconciled(h, "custom_events")) == 1
    audit_export(h.world.store, h.world.source_engine, s3, export_id).assert_clean(allow_extra=True)


def test_lookback_bounds_the_pass_and_zero_disables_it(h, moto):
    export_id = s3_export(h, moto)
    s3 = moto.admin_client()
    for hours in (3, 4, 5):  # 03:03 catches up with one window (0h, 3h]
        scheduled_tick(h, hours, lookback_hours=1)
    w03, w34 = Window(DAY0, DAY0 + 3 * HOUR_MS), Window(DAY0 + 3 * HOUR_MS, DAY0 + 4 * HOUR_MS)
    assert {w.window for w in h.world.store.ledger(export_id, dataset="email_events")} >= {w03, w34}
    insert_rows(h.world.source_engine, "email_events", late_email_rows(w03, 5, "old"))
    insert_rows(h.world.source_engine, "email_events", late_email_rows(w34, 7, "recent"))

    scheduled_tick(h, 6, lookback_hours=0)  # disabled: nothing recounted
    assert not reconciled(h, "email_events")
    assert audit_export(h.world.store, h.world.source_engine, s3, export_id).datasets["email_events"].missing == 12

    # 1 h of lateness at 1 h frequency recounts windows ending after now - (1 h + 2 × 1 h + 2 min):
    # at 07:03 that is after 04:01, so (3h, 4h] (now 3 h 03 min past its end) is out of reach.
    scheduled_tick(h, 7, lookback_hours=1)
    assert not reconciled(h, "email_events")
    # 3 h of lateness at 08:03 reaches back to 03:01: (3h, 4h] gets its late rows, (0h, 3h] does not.
    scheduled_tick(h, 8, lookback_hours=3)
    (obs,) = reconciled(h, "email_events")
    assert obs.asset_observation.metadata["reconciled_windows"].value == 1
    assert obs.asset_observation.metadata["late_rows_found"].value == 7
    rewritten = [w for w in h.world.store.ledger(export_id, dataset="email_events") if w.window == w34]
    assert [w.status for w in rewritten] == [COMMITTED, COMMITTED]
    audit = audit_export(h.world.store, h.world.source_engine, s3, export_id)
    assert audit.datasets["email_events"].missing == 5  # the row older than the lookback stays missed
    assert audit.duplicated == 0
