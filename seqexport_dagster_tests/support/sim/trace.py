"""A short trace of what happened to the row or object behind a violation: when the row was written
and what it carries, every ledger attempt of the windows it falls in (status, where, when), the
objects that carry it (either format), and the export's operations around it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import format_of_key
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.store.tables import windows
from seqexport_dagster_tests.support.sim.loaders import ids_of

if TYPE_CHECKING:
    from seqexport_dagster_tests.support.sim.oracles import Violation
    from seqexport_dagster_tests.support.sim.world import World

MAX_LINES = 24


def trace(world: World, v: Violation) -> str:
    e = world.exports.get(v.export)
    lines = [f"  trace of {v.row or v.detail[:80]}:"]
    if e is None:
        return "\n".join(lines + ["    (no export)"])
    where = {p.location: p.source for p in e.places}
    row = world.source.rows.get(v.row or "")
    if row is not None:
        lines.append(
            f"    row {row.id} ({row.dataset}, {row.account_id}) recorded_at {iso_ms(row.recorded_ms)}, "
            f"written to the source at {iso_ms(row.inserted_ms)}"
        )
        t = windows
        with world.engine.connect() as conn:
            attempts = conn.execute(
                sa.select(t.c.id, t.c.from_ms, t.c.to_ms, t.c.status, t.c.location, t.c.started_at, t.c.error)
                .where(t.c.export_id == e.export_id, t.c.dataset == row.dataset)
                .where(t.c.from_ms < row.recorded_ms, t.c.to_ms >= row.recorded_ms)
                .order_by(t.c.id)
            ).all()
        for w in attempts:
            lines.append(
                f"    window {Window(w.from_ms, w.to_ms)} attempt {w.id} {w.status} at {where.get(w.location, w.location)}"
                f", started {iso_ms(w.started_at)}{', error: ' + w.error[:100] if w.error else ''}"
            )
        for place in e.places:
            for key, body in world.buckets.get(place.bucket).objects.items():
                if key.startswith(place.prefix + "/") and format_of_key(key) is not None and row.id in _ids(key, body):
                    lines.append(f"    carried by s3://{place.bucket}/{key}")
        lo, hi = row.recorded_ms - 2 * 86_400_000, row.inserted_ms + 2 * 86_400_000
    else:
        lo, hi = world.start_ms, world.clock()
    ops = [op for op in world.ops if op.export == e.name and lo <= op.at_ms <= hi]
    lines += [f"    op {op.line()}" for op in ops]
    return "\n".join(lines[:MAX_LINES])


def _ids(key: str, body: bytes) -> list[str]:
    try:
        return ids_of(key, body)
    except Exception:  # an unreadable part carries nothing (the oracles report it)
        return []
