"""A replace that overwrote some parts and ended before its commit is finished by the next attempt
as the replace would have (simulator seed 1: a manifest ``through-NNNN`` re-sent create-only with
the new parts' body over the old one, on a store without preconditions).

The window has two parts (its range part and a late part). The replace re-cuts it: part 0000 holds
every row now and 0001 becomes an empty part; 0000 is overwritten, then every send of 0001 fails.
The next attempt (a backfill without replace) re-sends 0001: create-only, an ordinary store's 412
would keep the *old* 0001 (its rows then twice in the bucket, and the ledger short of them) and
the manifest would keep describing the old parts. Finished as the replace, the bucket holds each
row once and the newest manifest lists the parts as they are. Through the real runner, ledger and
reconciliation into moto behind the fault proxy, read back as a loader and as ``verify`` does.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import ExportError, RetryableError, UntypeableValue
from seqexport_dagster.store.tables import export_datasets
from seqexport_dagster_tests.support.bucket_audit import read_objects, source_ids
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import s3_export, s3_runner
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.scripted_store import ScriptedStore as Store
from seqexport_dagster_tests.support.sim.bucket import NO_PRECONDITION, ORDINARY
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)


@pytest.fixture
def proxy(moto: Any) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(moto.port, write_once=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def test_a_replace_that_ended_before_its_commit_is_finished_as_a_replace(
    world: World, moto: Any, proxy: fp.FaultProxy
) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    s3 = moto.admin_client()
    export = s3_export(world, s3, proxy, datasets=("email_events",), frequency="1h")
    runner = s3_runner(world, part_limit=500)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (first,) = world.store.ledger(export.id)  # the backlog, as one window
    w = first.window
    insert_rows(world.source_engine, "email_events", late_rows(w, 3, "late"))
    world.clock.now_ms += HOUR_MS
    reconcile(runner, export.id)
    old = world.store.window_parts(export.id, "email_events", w, export.location)
    assert [p.rows for p in old] == [first.rows, 3]

    # The replace: 0000 is overwritten with every row, then every send of 0001 fails.
    fault = proxy.add(fp.internal_error(match=old[1].key.rsplit("/", 1)[-1], times=None))
    world.clock.now_ms += HOUR_MS
    with pytest.raises(ExportError):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    assert world.store.replace_unfinished(export.id, "email_events", w, export.location)

    proxy.remove(fault)
    world.clock.now_ms += HOUR_MS
    runner.run_day(export.id, "email_events", DAY, rewrite=True)
    assert not world.store.replace_unfinished(export.id, "email_events", w, export.location)

    objects = read_objects(s3, export.bucket, export.prefix)
    found: Counter[str] = Counter()
    for key, body in objects.items():
        if key.startswith("email_events/") and key.endswith(".jsonl.gz"):
            found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
    position = world.store.get_export(export.id).dataset_state("email_events")
    assert position is not None
    assert set(found) == source_ids(world.source_engine, "email_events", "acme", (DAY0, position.position_ms))
    assert max(found.values()) == 1, "every row once"
    parts = world.store.window_parts(export.id, "email_events", w, export.location)
    assert [p.rows for p in parts] == [first.rows + 3, 0]
    (newest,) = [k for k in objects if k.startswith("_sequenzy/manifests/") and k.endswith("through-0001.json")]
    manifest = json.loads(objects[newest])
    in_bucket = {k: hashlib.md5(b, usedforsecurity=False).hexdigest() for k, b in objects.items()}
    assert [(p["rows"], p["md5"]) for p in manifest["parts"]] == [
        (p.rows, in_bucket[p.key.removeprefix(f"{export.prefix}/")]) for p in parts
    ], "the newest manifest describes the parts in the bucket"


@pytest.mark.parametrize("write_once", [False, True], ids=["ordinary", "create-only"])
def test_a_replace_stopped_at_its_first_part_is_run_again_whole(world: World, moto: Any, write_once: bool) -> None:
    """Sim seed 10000118: the replace's overwrite of 0000 (now every row, the late ones too) landed
    but its answer was lost, so the attempt ended before reaching 0001, the old late part. Finishing
    only 0000 kept 0001 beside it: its rows twice. The replace is run again whole (0001 blanked).
    A create-only key refuses the replace's first write and nothing changes: the next attempt
    delivers as before, the late part included, each row once."""
    server = fp.FaultProxy(moto.port, write_once=write_once)
    try:
        generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=Scale(30, 20, 0, 0))
        s3 = moto.admin_client()
        export = s3_export(world, s3, server, datasets=("email_events",), frequency="1h")
        runner = s3_runner(world, part_limit=500)
        world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
        runner.run_day(export.id, "email_events", DAY)
        (first,) = world.store.ledger(export.id)
        w = first.window
        insert_rows(world.source_engine, "email_events", late_rows(w, 3, "late"))
        world.clock.now_ms += HOUR_MS
        reconcile(runner, export.id)
        old = world.store.window_parts(export.id, "email_events", w, export.location)
        assert [p.rows for p in old] == [first.rows, 3]

        fault = server.add(fp.lost_reply(match=old[0].key.rsplit("/", 1)[-1], times=None))
        world.clock.now_ms += HOUR_MS
        with pytest.raises(ExportError):
            runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
        server.remove(fault)
        world.clock.now_ms += HOUR_MS
        runner.run_day(export.id, "email_events", DAY, rewrite=True)

        found: Counter[str] = Counter()
        for key, body in read_objects(s3, export.bucket, export.prefix).items():
            if key.startswith("email_events/") and key.endswith(".jsonl.gz"):
                found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
        position = world.store.get_export(export.id).dataset_state("email_events")
        assert position is not None
        assert set(found) == source_ids(world.source_engine, "email_events", "acme", (DAY0, position.position_ms))
        assert [i for i, n in found.items() if n > 1] == [], "every row once"
        parts = world.store.window_parts(export.id, "email_events", w, export.location)
        assert [p.rows for p in parts] == ([first.rows, 3] if write_once else [first.rows + 3, 0])
        latest = max(
            (a for a in world.store.ledger(export.id) if a.window == w and a.status == "committed"), key=lambda a: a.id
        )
        assert latest.rows == first.rows + 3, "the ledger counts each row once"
    finally:
        server.close()


@pytest.mark.parametrize("kind", [ORDINARY, NO_PRECONDITION])
def test_a_replace_whose_failure_was_never_recorded_is_finished_by_reconciliation(world: World, kind: str) -> None:
    """Sim seed 10001768. A window committed with its range part and a late part; an operator's
    replace overwrites 0000 with every row (the late ones too) and stops there, the control plane
    down: its failure is never recorded, so no error names the window, and every part is landed.
    Before, nothing came back to it and the late rows stayed twice (0000 and the old 0001). The
    scheduled reconciliation finds the unfinished replace and finishes it: 0001 blanked."""
    export = world.local_export(datasets=("email_events",))
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    store = Store(kind)
    runner = world.runner(part_limit=500, destination_factory=lambda config, policy: store)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (first,) = world.store.ledger(export.id)
    w = first.window
    insert_rows(world.source_engine, "email_events", late_rows(w, 3, "late"))
    world.clock.now_ms += 10 * MINUTE_MS
    reconcile(runner, export.id)
    old = world.store.window_parts(export.id, "email_events", w, export.location)
    assert [p.rows for p in old] == [first.rows, 3]

    record = world.store.record_part_intent

    def outage_at_0001(window_id: int, *, number: int, **kw: Any) -> None:
        if number == 1:
            raise RetryableError("control-plane database unavailable")
        record(window_id, number=number, **kw)

    world.clock.now_ms += 10 * MINUTE_MS
    with mock.patch.object(world.store, "record_part_intent", outage_at_0001), pytest.raises(ExportError):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    with world.control_engine.begin() as conn:  # the outage also kept its failure from the ledger
        conn.execute(
            export_datasets.update().values(
                failures=0, next_retry_at=None, last_error=None, last_error_from_ms=None, last_error_to_ms=None
            )
        )
    assert world.store.replace_unfinished(export.id, "email_events", w, export.location)
    assert all(p.landed for p in world.store.window_parts(export.id, "email_events", w, export.location))
    world.clock.now_ms += 10 * MINUTE_MS
    reconcile(runner, export.id, lateness_ms=DAY_MS, thin=True)  # what a scheduled run does

    assert not world.store.replace_unfinished(export.id, "email_events", w, export.location)
    found: Counter[str] = Counter()
    for key, body in store.bucket.objects.items():
        if key.startswith("email_events/"):
            found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
    assert len(found) == first.rows + 3 and max(found.values()) == 1, "every row once"
    assert [p.rows for p in world.store.window_parts(export.id, "email_events", w, export.location)] == [
        first.rows + 3,
        0,
    ]
    assert store.bucket.violations == []


def test_a_replace_stopped_by_a_bad_source_value_is_finished_once_the_row_is_fixed(world: World) -> None:
    """Sim seed 56000035. An operator's replace reads a row whose value the contract cannot type
    before its first part: `UntypeableValue`, nothing overwritten. With a Delta table the replace has
    already taken the window out of the table, so the replace stays owed (it was cleared as if the
    store had refused it, and the window then stayed in no table). Once the row is fixed, the next
    reconciliation pass finishes it as a replace."""
    export = world.local_export(datasets=("email_events",))
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    store = Store(ORDINARY)
    runner = world.runner(part_limit=500, destination_factory=lambda config, policy: store)
    world.clock.now_ms = DAY0 + HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (first,) = world.store.ledger(export.id)
    w = first.window
    row = min(source_ids(world.source_engine, "email_events", "acme", (w.from_ms, w.to_ms)))
    with world.source_engine.begin() as conn:
        email = conn.execute(sa.text("SELECT email FROM email_events WHERE id = :i"), {"i": row}).scalar()
        conn.execute(
            sa.text("UPDATE email_events SET email = CAST(:v AS TEXT) WHERE id = :i"), {"v": b"\xff", "i": row}
        )

    world.clock.now_ms += HOUR_MS
    with pytest.raises(UntypeableValue, match=f"row '{row}': field email"):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    assert world.store.replace_unfinished(export.id, "email_events", w, export.location), "the replace is owed"

    with world.source_engine.begin() as conn:
        conn.execute(sa.text("UPDATE email_events SET email = :v WHERE id = :i"), {"v": email, "i": row})
    world.clock.now_ms += HOUR_MS
    reconcile(runner, export.id)  # the scheduled pass finds the unfinished replace
    assert not world.store.replace_unfinished(export.id, "email_events", w, export.location)
    latest = max((a for a in world.store.ledger(export.id) if a.window == w), key=lambda a: a.id)
    assert (latest.status, latest.rows) == ("committed", first.rows)
