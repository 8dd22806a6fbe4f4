"""An event part of unknown outcome, re-sent after late rows changed how the source batches its rows
(`writer.Deflater`), on every kind of store the simulator knows (`support.sim.bucket`).

isal's gzip output depends on how its input is split across calls. The re-send cuts part 0000 again
from its recorded ids, but late rows that arrived in between sit among them in the source's
batches, so the same rows reached the compressor in other pieces and came out as other bytes. A
store without preconditions then replaced the landed object with them (a simulator run of seed 3
under load: a ``custom_events`` part on a ``nopre`` bucket). The writer now feeds isal fixed slices,
so the re-cut is the bytes first sent, whatever the batches.

Through the real runner, part ledger and source reader, into the simulator's in-memory buckets.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.errors import RetryableError
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster_tests.support.parts import part_rows
from seqexport_dagster_tests.support.scripted_store import ScriptedStore as Store
from seqexport_dagster_tests.support.sim.bucket import KINDS
from seqexport_dagster_tests.support.world import DAY0, World

WINDOW = Window(DAY0, DAY0 + HOUR_MS)
PART = part_key("", "custom_events", WINDOW, 0)


def add_late_rows(world: World) -> int:
    """Every third row of the window again under a new id, recorded at the same time: they sort
    among the window's rows, so the source's batches of the re-cut hold other rows than before."""
    with world.source_engine.connect() as conn:
        rows = [list(r) for r in conn.execute(sa.text("SELECT * FROM custom_events ORDER BY recorded_at, id"))]
    copies = [tuple([*r[:1], f"cev_late_{i:05d}", *r[2:]]) for i, r in enumerate(rows[::3])]
    return insert_rows(world.source_engine, "custom_events", copies)


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_cut_again_among_late_rows_is_resent_as_the_bytes_first_sent(world: World, kind: str) -> None:
    export = world.local_export(datasets=("custom_events",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(custom_per_hour=400))
    store = Store(kind)
    # Small source batches: many pieces per part, so where the late rows fall changes the pieces.
    runner = Runner(
        world.store, SourceReader(world.source_engine, batch_size=7), world.policy, clock=world.clock,
        part_limit=1_000, destination_factory=lambda config, policy: store,
    )  # fmt: skip
    world.clock.now_ms = WINDOW.to_ms + 10 * MINUTE_MS
    store.faults[PART.rsplit("/", 1)[-1]] = "lost"
    with pytest.raises(RetryableError):
        runner.write_window(export.id, "custom_events", WINDOW)
    first = store.bucket.objects[PART]
    assert add_late_rows(world) > 100

    world.clock.now_ms += HOUR_MS
    report = runner.write_window(export.id, "custom_events", WINDOW)
    assert report.sent.resent == 1
    assert store.bucket.violations == [], "the re-send is the landed bytes: nothing replaced, no other body"
    assert store.bucket.objects[PART] == first
    (late,) = [k for k in store.bucket.objects if k.endswith("-0001.jsonl.gz")]
    assert all(r["id"].startswith("cev_late_") for r in part_rows(late, store.bucket.objects[late]))
