"""A replace refused by a create-only key writes nothing (simulator seed 10000000).

A window delivered whole at one place, then moved (prefix) to a create-only key, gets its late rows
at the new place as a part numbered on (``-0001``). A backfill with replace of that day then
re-cuts the window from part ``0000`` at the new place: ``-0000`` is a new name there, so the
create-only store took it, and the refusal came only at ``-0001``, which exists. The new place
then held the late rows twice (in ``-0000`` and ``-0001``): a Snowpipe loader and a by-window
loader would both load them twice, and ``verify --ledger`` reported ``duplicate_id``. The replace
now checks first that the key may overwrite (a probe object under ``_sequenzy/``), and is refused
before any part is written. Real runner, ledger and reconciliation into moto behind the write-once
fault proxy (GCS Storage Object Creator semantics).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import AccessDenied
from seqexport_dagster_tests.support.bucket_audit import read_objects
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import ACCESS_KEY, SECRET_KEY, s3_export, s3_runner
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)


@pytest.fixture
def proxy(moto: Any) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(moto.port, write_once=True)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def _ids(objects: dict[str, bytes]) -> Counter[str]:
    found: Counter[str] = Counter()
    for key, body in objects.items():
        if key.startswith("email_events/") and key.endswith(".jsonl.gz"):
            found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
    return found


def test_a_refused_replace_after_a_move_writes_nothing_at_the_new_place(
    world: World, moto: Any, proxy: fp.FaultProxy
) -> None:
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=Scale(30, 20, 0, 0))
    s3 = moto.admin_client()
    export = s3_export(world, s3, proxy, datasets=("email_events",), frequency="1h", prefix="old")
    runner = s3_runner(world)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)
    (first,) = world.store.ledger(export.id)  # the backlog, as one window, at the old prefix
    w = first.window

    moved = DestinationConfig(
        "gcs", export.bucket, prefix="new", region="auto", endpoint=proxy.endpoint,
        access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
    )  # fmt: skip
    world.clock.now_ms += MINUTE_MS
    export = world.store.update_destination(export.id, moved, world.clock())
    insert_rows(world.source_engine, "email_events", late_rows(w, 2, "late"))
    world.clock.now_ms += HOUR_MS
    reconcile(runner, export.id)
    before = read_objects(s3, export.bucket, "new")
    late_keys = [k for k in before if k.startswith("email_events/")]
    assert [k.rsplit("-", 1)[-1] for k in late_keys] == ["0001.jsonl.gz"], "the late rows continue the window here"
    assert sum(_ids(before).values()) == 2

    world.clock.now_ms += HOUR_MS
    with pytest.raises(AccessDenied, match="Replacing files needs a key that may overwrite"):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)

    after = read_objects(s3, export.bucket, "new")
    assert [k for k in after if k.startswith("email_events/")] == late_keys, "no part written by the refused replace"
    found = _ids(after)
    assert max(found.values()) == 1 and len(found) == 2, "each late row once at the new place"
    parts = world.store.window_parts(export.id, "email_events", w, export.location)
    assert [(p.number, p.rows, p.landed) for p in parts] == [(1, 2, True)], "the ledger is as before the replace"

    # A backfill without replace (what the refusal advises) re-delivers the window here
    # (docs/operators.md, backfills after a move), still each row once at this place.
    world.clock.now_ms += HOUR_MS
    runner.run_day(export.id, "email_events", DAY, rewrite=True)
    again = _ids(read_objects(s3, export.bucket, "new"))
    assert set(found) < set(again) and max(again.values()) == 1
