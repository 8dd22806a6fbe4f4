"""Replaces and backfills of windows delivered before a move, as long run #3 and the seeds after it
found them, through the real runner, part ledger and reconciliation into the simulator's in-memory
buckets (each provider's write semantics, and a log of every send that flags a replaced object or a
different body under a landed name).

- Sim seed 10001195: a replace on a create-only key (GCS Storage Object Creator, answering 412) of a
  window whose part 0000 had landed. Its first intent replaced the part's record and the answer was
  lost, so the replace was unfinished; every pass after redid it, was refused, and the window's
  failure kept its dataset's reconciliation from reaching later windows: 9 late rows never left.
  A replace now asks the key first, before it records anything (once per place and run).
- Sim seed 3: a backfill without replace of a window delivered whole at the old place, which had
  only a late part at the new one, sent the old place's rows again at the new place.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter

import pytest

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import AccessDenied, RetryableError
from seqexport_dagster.store import ExportRecord
from seqexport_dagster_tests.support.bucket_audit import source_ids
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.scripted_store import ScriptedStore
from seqexport_dagster_tests.support.sim.bucket import CREATE_ONLY_403, CREATE_ONLY_412, ORDINARY
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
SCALE = Scale(subscribers=20, email_sends_per_hour=12, sms_sends_per_hour=0, custom_per_hour=0)
W01 = Window(DAY0, DAY0 + HOUR_MS)
PROBES = "_sequenzy/connection-test-overwrite-probe-"


def ids_in(stores: list[ScriptedStore]) -> Counter[str]:
    found: Counter[str] = Counter()
    for store in stores:
        for key, body in store.bucket.objects.items():
            if "/email_events/" in f"/{key}" and key.endswith(".jsonl.gz"):
                found.update(json.loads(line)["id"] for line in gzip.decompress(body).splitlines())
    return found


def scheduled(world: World, runner: object, export: ExportRecord, hour: int) -> None:
    """The scheduled run at ``hour`` h + 3 min: the due windows, then reconciliation."""
    world.clock.now_ms = DAY0 + hour * HOUR_MS + 3 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY)  # type: ignore[attr-defined]
    reconcile(runner, export.id)  # type: ignore[arg-type]


def test_a_replace_on_a_create_only_key_is_refused_before_anything_is_recorded(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), frequency="1h")
    store = ScriptedStore(CREATE_ONLY_412)
    runner = world.runner(part_limit=1000, destination_factory=lambda config, policy: store)
    scheduled(world, runner, export, 1)
    insert_rows(world.source_engine, "email_events", late_rows(W01, 2, "before"))
    scheduled(world, runner, export, 2)  # W01 gets its late rows as part 0001
    before = world.store.window_parts(export.id, "email_events", W01, export.location)
    assert [p.number for p in before] == [0, 1] and all(p.landed for p in before)

    world.clock.now_ms += 10 * MINUTE_MS
    with pytest.raises(AccessDenied, match="Replacing files needs a key that may overwrite"):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    assert world.store.window_parts(export.id, "email_events", W01, export.location) == before, "no record touched"
    assert not world.store.replace_unfinished(export.id, "email_events", W01, export.location)
    assert not [w for w in store.bucket.writes if "/email_events/" in f"/{w.key}" and w.plain_intended]

    # Nothing is left for a later pass to redo: the next late rows go out as usual.
    insert_rows(world.source_engine, "email_events", late_rows(W01, 3, "after"))
    scheduled(world, runner, export, 3)
    assert store.bucket.violations == []
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, DAY0 + 3 * HOUR_MS))
    counted = ids_in([store])
    assert set(counted) == expected and max(counted.values()) == 1


def test_a_replace_of_a_day_probes_the_key_once(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 4 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), frequency="1h")
    store = ScriptedStore(ORDINARY)
    runner = world.runner(part_limit=1000, destination_factory=lambda config, policy: store)
    for hour in (1, 2, 3, 4):
        scheduled(world, runner, export, hour)
    world.clock.now_ms += HOUR_MS
    report = runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    assert len([w for w in report.windows if w.sent.parts]) >= 4, "the four windows rewritten (and the one due now)"
    assert len([k for k in store.bucket.objects if k.startswith(PROBES)]) == 1
    assert store.bucket.violations == []


def test_a_backfill_of_a_window_moved_after_delivery_sends_only_what_no_place_holds(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), frequency="1h", prefix="old")
    old, new = ScriptedStore(ORDINARY), ScriptedStore(ORDINARY)
    stores = {"old": old, "new": new}
    runner = world.runner(part_limit=1000, destination_factory=lambda config, policy: stores[config.prefix])
    scheduled(world, runner, export, 1)
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="new")
    export = world.store.update_destination(export.id, moved, world.clock())
    insert_rows(world.source_engine, "email_events", late_rows(W01, 2, "moved"))
    scheduled(world, runner, export, 2)  # W01's late rows: part 0001, at the new place
    assert [p.number for p in world.store.window_parts(export.id, "email_events", W01, export.location)] == [1]

    world.clock.now_ms += 10 * MINUTE_MS
    report = runner.run_day(export.id, "email_events", DAY, rewrite=True)
    assert all(w.sent.late_rows == 0 for w in report.windows if w.window == W01), "nothing was missing"
    expected = source_ids(world.source_engine, "email_events", "acme", (DAY0, DAY0 + 2 * HOUR_MS))
    counted = ids_in([old, new])
    assert set(counted) == expected and max(counted.values()) == 1, "every row once across both places"
    assert old.bucket.violations == new.bucket.violations == []


@pytest.mark.parametrize("kind", [ORDINARY, CREATE_ONLY_403])
def test_a_backfill_at_the_new_place_counts_a_late_part_it_re_sends(world: World, kind: str) -> None:
    """Sim seed 10002190. A window delivered at the old place gets its late rows at the new one as
    part 0001, whose answer is lost: the pass fails with the part at intent and nothing committed
    there. An operator's backfill of the day then delivers the window there whole (nothing is
    committed at that place), after re-sending 0001. The rows of 0001 were left out only if it had
    landed before the backfill began, so its two late rows went out again in the new part 0002."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), frequency="1h", prefix="old")
    old, new = ScriptedStore(ORDINARY), ScriptedStore(kind)
    stores = {"old": old, "new": new}
    runner = world.runner(part_limit=1000, destination_factory=lambda config, policy: stores[config.prefix])
    scheduled(world, runner, export, 1)
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="new")
    export = world.store.update_destination(export.id, moved, world.clock())
    insert_rows(world.source_engine, "email_events", late_rows(W01, 2, "moved"))
    new.faults[f"email_events-{W01.from_ms}-{W01.to_ms}-0001.jsonl.gz"] = "lost"
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    with pytest.raises(RetryableError):
        reconcile(runner, export.id, retry_delays_s=(), sleep=lambda _s: None)
    (late,) = world.store.window_parts(export.id, "email_events", W01, export.location)
    assert late.number == 1 and not late.landed

    world.clock.now_ms += 10 * MINUTE_MS
    runner.run_day(export.id, "email_events", DAY, rewrite=True)
    here = world.store.window_parts(export.id, "email_events", W01, export.location)
    assert [(p.number, p.landed) for p in here] == [(1, True), (2, True)]
    counted = ids_in([new])
    assert max(counted.values()) == 1, "every row once at the new place"
    assert set(counted) >= set(ids_in([old])), "the window whole at the new place"
    assert old.bucket.violations == new.bucket.violations == []


@pytest.mark.parametrize("part_limit", [4, 1000])
def test_a_replace_at_the_new_place_that_stopped_at_its_first_part_keeps_the_late_part_once(
    world: World, part_limit: int
) -> None:
    """Sim seed 56000391. A window delivered at the old place gets its late rows at the new one as
    a late part whose answer is lost (at intent). An operator's replace of the day there records its
    part 0000 (cut from the whole window) and its PUT fails before anything lands. The next pass
    delivers the window there (nothing is committed at that place): it re-sends 0000 and the late
    part under their names, then cut the window on after 0000's boundary without leaving out the
    late part's rows (only a window with no range part of its own here left them out): the late
    rows went out a second time in a new part."""
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    export = world.local_export(datasets=("email_events",), frequency="1h", prefix="old")
    old, new = ScriptedStore(ORDINARY), ScriptedStore(ORDINARY)
    stores = {"old": old, "new": new}
    runner = world.runner(part_limit=part_limit, destination_factory=lambda config, policy: stores[config.prefix])
    scheduled(world, runner, export, 1)
    old_parts = [p.number for p in world.store.window_parts(export.id, "email_events", W01, export.location)]
    moved = DestinationConfig("local", str(world.root / "bucket"), prefix="new")
    export = world.store.update_destination(export.id, moved, world.clock())
    insert_rows(world.source_engine, "email_events", late_rows(W01, 2, "moved"))
    late_number = max(old_parts) + 1
    new.faults[f"email_events-{W01.from_ms}-{W01.to_ms}-{late_number:04d}.jsonl.gz"] = "lost"
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + 3 * MINUTE_MS
    with pytest.raises(RetryableError):
        reconcile(runner, export.id, retry_delays_s=(), sleep=lambda _s: None)
    (late,) = world.store.window_parts(export.id, "email_events", W01, export.location)
    assert late.number == late_number and not late.landed

    world.clock.now_ms += 10 * MINUTE_MS
    new.faults[f"email_events-{W01.from_ms}-{W01.to_ms}-0000.jsonl.gz"] = "reset"  # refused before it landed
    with pytest.raises(RetryableError):
        runner.run_day(export.id, "email_events", DAY, rewrite=True, replace=True)
    here = world.store.window_parts(export.id, "email_events", W01, export.location)
    assert [(p.number, p.landed) for p in here] == [(0, False), (late_number, False)]

    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    scheduled(world, runner, export, 3)
    counted = ids_in([new])
    assert max(counted.values()) == 1, f"every row once at the new place: {[i for i, n in counted.items() if n > 1]}"
    assert set(counted) >= set(ids_in([old])), "the window whole at the new place"
    assert old.bucket.violations == new.bucket.violations == []
