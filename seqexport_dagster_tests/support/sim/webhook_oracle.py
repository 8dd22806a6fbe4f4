"""Invariant 7 (issue 26): ``dataset.day_complete`` events, read from the control plane's outbox.

- once: at most one event per (export, dataset, UTC day);
- never lost: every dataset-day that the positions say is complete (a stint's position reached the
  day's end after it was added) has its event;
- never early: when the event was recorded, the day's committed windows (since the dataset was last
  added) chain without a gap up to midnight, every part they landed exists in the simulated bucket (written at or before the event),
  and for ``subscribers`` so does the day's ``_SUCCESS``.
Each event is checked once, on the day after it was recorded (before retention could compact it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.keys import SNAPSHOT_DATASET, success_key
from seqexport_dagster.contract.window import DAY_MS, day_of, day_start, day_start_ms
from seqexport_dagster.store import COMMITTED, PART_LANDED
from seqexport_dagster.store.tables import export_datasets, parts, webhook_events, windows
from seqexport_dagster.store.webhook_records import DAY_COMPLETE
from seqexport_dagster_tests.support.sim.world import World


@dataclass
class WebhookOracle:
    checked: set[str] = field(default_factory=set)
    events: int = 0

    def check(self, world: World, violation: Any) -> list[Any]:
        found: list[Any] = []
        names = {e.export_id: e for e in world.exports.values()}
        with world.engine.connect() as conn:
            rows = conn.execute(
                sa.select(webhook_events.c.id, webhook_events.c.body, webhook_events.c.created_at).where(
                    webhook_events.c.type == DAY_COMPLETE
                )
            ).all()
            stints = conn.execute(sa.select(export_datasets)).all()
        seen: Counter[tuple[str, str, str]] = Counter()
        for r in rows:
            data = json.loads(r.body)["data"]
            seen[(data["export_id"], data["dataset"], data["date"])] += 1
        for key, count in seen.items():
            if count > 1:
                found.append(
                    violation(
                        "webhook",
                        names[key[0]].name if key[0] in names else key[0],
                        f"{count} day_complete events for {key[1]} {key[2]}",
                    )
                )
        for s in stints:
            end = day_start(s.added_at) + DAY_MS
            while end <= s.position_ms:
                key = (s.export_id, s.dataset, day_of(end - DAY_MS).isoformat())
                if key not in seen:
                    found.append(
                        violation(
                            "webhook",
                            names[s.export_id].name if s.export_id in names else s.export_id,
                            f"no day_complete for {key[1]} {key[2]} (position reached its end)",
                        )
                    )
                end += DAY_MS
        for r in rows:
            if r.id in self.checked:
                continue
            self.checked.add(r.id)
            self.events += 1
            data = json.loads(r.body)["data"]
            e = names.get(data["export_id"])
            if e is None:
                continue
            for problem in early(world, e, data, r.created_at):
                found.append(violation("webhook", e.name, f"day_complete {data['dataset']} {data['date']}: {problem}"))
        return found


def early(world: World, e: Any, data: dict[str, Any], at: int) -> list[str]:
    """What the bucket and ledger lacked when the event was recorded."""
    dataset, date = data["dataset"], data["date"]
    start = _day_ms(date)
    places = {p.location: p for p in e.places}
    with world.engine.connect() as conn:
        done = conn.execute(
            sa.select(windows.c.from_ms, windows.c.to_ms, windows.c.location)
            .where(
                windows.c.export_id == e.export_id,
                windows.c.dataset == dataset,
                windows.c.from_ms >= start,
                windows.c.from_ms < start + DAY_MS,
                windows.c.status == COMMITTED,
                windows.c.finished_at <= at,
            )
            .distinct()
        ).all()
        landed = conn.execute(
            sa.select(parts.c.key, parts.c.location).where(
                parts.c.export_id == e.export_id,
                parts.c.dataset == dataset,
                parts.c.from_ms >= start,
                parts.c.from_ms < start + DAY_MS,
                parts.c.status == PART_LANDED,
                parts.c.landed_at <= at,
            )
        ).all()
        added_at = conn.execute(  # the stint that completed the day: the last one added before the event
            sa.select(sa.func.max(export_datasets.c.added_at)).where(
                export_datasets.c.export_id == e.export_id,
                export_datasets.c.dataset == dataset,
                export_datasets.c.added_at <= at,
            )
        ).scalar()
    problems: list[str] = []
    # A dataset removed and added again the same day chains from its new start (the windows of its
    # earlier stint that day stay, with the gap of its absence before the new ones).
    since = added_at if added_at is not None else start
    bounds = sorted({(w.from_ms, w.to_ms) for w in done if w.to_ms > since})
    if not bounds or bounds[-1][1] != start + DAY_MS:
        problems.append("no committed window ends at midnight yet")
    for (_, to), (nxt, _) in zip(bounds, bounds[1:], strict=False):
        if nxt > to:
            problems.append(f"a gap in the day's committed windows at {to}")
            break
    for p in landed:
        place = places.get(p.location)
        if place is None:
            continue
        written = created_at(world, place.bucket, p.key)
        if written is None:
            problems.append(f"{p.key} is not in the bucket")
        elif written > at:
            problems.append(f"{p.key} was written after the event")
    if dataset == SNAPSHOT_DATASET:
        marks = [created_at(world, pl.bucket, success_key(pl.prefix, day_of(start))) for pl in e.places]
        if not any(m is not None and m <= at for m in marks):
            problems.append("_SUCCESS was not in the bucket")
    return problems


def _day_ms(date: str) -> int:
    return day_start_ms(dt.date.fromisoformat(date))


def created_at(world: World, bucket: str, key: str) -> int | None:
    times = [
        w.at_ms for w in world.buckets.get(bucket).writes if w.key == key and w.answer in ("created", "overwritten")
    ]
    return min(times) if times else None
