"""Write-once delivery end to end: a GCS export with the role the customer docs prescribe.

A real Dagster instance (the real scheduler sensor, runs executed in-process on it) exports into a
real moto bucket behind the write-once proxy, which answers as GCS's "Storage Object Creator" does:
403 to any overwrite, 412 to a create-only write of a name that exists. The export's writes carry
GCS's ``x-goog-if-generation-match: 0``. Along the way:

1. a 503 on part 0001 of a 3-part window fails the run; the sensor's retry resumes after part 0000;
2. a row lands late inside a committed window; the next scheduled run appends it as a new part;
3. an operator backfills the complete day from the UI; it delivers nothing twice.

The export keeps flowing, status shows no error afterwards, no PUT ever reached an existing name,
and the bucket passes ``seqexport verify`` (with the ledger check).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms
from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.delivery.batch import RETRY_DELAYS_S, BatchRunner
from seqexport_dagster.delivery.day_run import REPLACE_TAG
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.management.verify import verify_location
from seqexport_dagster.store import ExportRecord
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"
PREFIX = "sequenzy"
KEY_ID, SECRET = "GOOG1EWRITEONCEHMAC", "write-once-hmac-secret-0001"
W01, W12 = Window(DAY0, DAY0 + HOUR_MS), Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)


#: The in-run retry delays the batched runs asked for, in order (`SmallParts.batch`).
WAITED: list[float] = []


class SmallParts(ExporterResource):
    """Production wiring with a small part limit, so an ordinary hour has three parts. Its batched
    runs note their in-run retry delays instead of sleeping them (6 s of the test's wall time)."""

    part_limit: int = 10

    def runner(self, **kwargs: Any) -> Runner:
        return super().runner(part_limit=self.part_limit, **kwargs)

    def batch(self, *, holder: str, **kwargs: Any) -> BatchRunner:
        return super().batch(holder=holder, sleep=WAITED.append, **kwargs)


@pytest.fixture
def h(tmp_path, monkeypatch):
    with harness(tmp_path, monkeypatch) as value:
        generate_account(value.world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(30, 20, 1, 2))
        yield value


@pytest.fixture
def proxy(moto):
    server = fp.FaultProxy(moto.port, write_once=True)
    yield server
    server.close()


def gcs_export(h: Harness, moto: Any, proxy: fp.FaultProxy) -> tuple[str, ExportRecord]:
    """An hourly email export to a fresh bucket, as GCS with the Object Creator role (the proxy)."""
    bucket = f"gcs-{uuid.uuid4().hex[:12]}"
    moto.admin_client().create_bucket(Bucket=bucket)
    export = h.world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "gcs", bucket, prefix=PREFIX, endpoint=proxy.endpoint, access_key_id=KEY_ID, secret_access_key=SECRET
        ),
        datasets=("email_events",),
        frequency="1h",
        lag_ms=2 * MINUTE_MS,
        now_ms=DAY0,
    )
    return bucket, export


def at(h: Harness, hours: float) -> None:
    h.world.clock.now_ms = DAY0 + int(hours * HOUR_MS) + 3 * MINUTE_MS


def test_gcs_creator_role_export_survives_a_fault_a_late_row_and_a_backfill(h, moto, proxy):
    bucket, export = gcs_export(h, moto, proxy)
    rows_w12 = h.world.source.count_window("email_events", "acme", W12)
    limit = math.ceil(rows_w12 / 3)
    assert 2 * limit < rows_w12, "three parts"
    h.exporter_class = SmallParts
    h.exporter_fields = {"part_limit": limit}

    at(h, 1)
    assert all(r.success for r in h.tick().results)

    # 1. Part 0001 of (1h, 2h] meets 503 on every send: the export fails after its in-run retries
    #    (the batched run itself succeeds: the failure is the export's, recorded for its backoff).
    target = f"email_events-{W12.from_ms}-{W12.to_ms}-0001"
    outage = proxy.add(fp.slow_down(match=target, times=None))
    at(h, 2)
    WAITED.clear()
    (failed,) = h.tick().results
    assert WAITED == list(RETRY_DELAYS_S)  # every in-run retry, each after its delay
    assert not failed.success  # the run carried only this export: it fails as the export did
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1 and "SlowDown" in (state.last_error or "")
    landed = {r.path for r in proxy.puts(f"-{W12.from_ms}-{W12.to_ms}-") if r.status == 200}
    assert [p[-14:] for p in sorted(landed)] == ["-0000.jsonl.gz"]
    proxy.remove(outage)
    h.world.clock.now_ms = state.next_retry_at or 0
    assert all(r.success for r in h.tick().results)
    w12_puts = [(r.path[-14:], r.status) for r in proxy.puts(f"-{W12.from_ms}-{W12.to_ms}-") if r.fault is None]
    assert w12_puts.count(("-0000.jsonl.gz", 200)) == 1, "the landed part is never sent again"
    assert ("-0002.jsonl.gz", 200) in w12_puts

    # 2. A row recorded inside (0h, 1h] becomes visible late; the next scheduled run appends it.
    late_at = iso_ms(W01.from_ms + 1234)
    insert_rows(
        h.world.source_engine,
        "email_events",
        [("acme", "eev_late_0001", "delivered", late_at, late_at, "sub_acme_0000001", "late@example.com",
          None, None, "msg_late_1", "Late", None, None, None, None, None)],
    )  # fmt: skip
    at(h, 3)
    assert all(r.success for r in h.tick().results)
    appended = [r.path for r in proxy.puts(f"-{W01.from_ms}-{W01.to_ms}-") if r.status == 200]
    assert len(appended) == len(set(appended)) >= 2

    # 3. The rest of the day, then an operator's backfill of the complete day: nothing is re-sent.
    for hours in range(4, 25):
        at(h, hours)
        assert all(r.success for r in h.tick().results)
    before = len(proxy.puts())
    result = h.run([export.id], D0, ["email_events"], tags={"dagster/backfill": "ui-backfill"})
    assert result.success
    assert len(proxy.puts()) == before, "a backfill of a complete day sends nothing"

    assert proxy.overwrites == [], "no PUT ever reached an existing name"
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 0 and state.last_error is None
    assert state.position_ms == DAY0 + DAY_MS
    report = verify_location(
        f"gs://{bucket}/{PREFIX}",
        s3_endpoint=moto.endpoint,
        access_key_id="admin",
        secret_access_key="admin",
        ledger=(h.world.store, export.id),
        part_limit=h.exporter_fields["part_limit"],
    )
    assert report.ok and report.ledger_checked, report.render()
    audit = audit_export(h.world.store, h.world.source_engine, moto.admin_client(), export.id)
    audit.assert_clean()  # every source row, the late one included, exactly once


def test_replace_is_explicit_and_fails_clearly_on_a_create_only_key(h, moto, proxy):
    bucket, export = gcs_export(h, moto, proxy)
    at(h, 1)
    assert all(r.success for r in h.tick().results)
    result = h.run([export.id], D0, ["email_events"], tags={"dagster/backfill": "bf", REPLACE_TAG: "true"})
    # The refusal is the export's error (its last error, the run's log); the run of that one
    # export fails with the customer message first.
    assert not result.success
    state = h.world.store.get_export(export.id).dataset_state("email_events")
    message = (state.last_error or "") if state is not None else ""
    logged = "\n".join(e.user_message for e in h.instance.all_logs(result.run_id))
    assert "email_events: 1 export(s): 0 window(s)" in logged and f"1 failed: {export.id} (account " in logged
    assert "Replacing files needs a key that may overwrite" in message
    assert "Run the backfill without replace" in message and SECRET not in message
    assert proxy.overwrites, "the replace did try to overwrite, and the bucket refused"
    assert len(proxy.overwrites) == 1, "it stopped at the first refusal"
