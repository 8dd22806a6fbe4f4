"""Late rows arrive within the documented bound (docs/customers.md, "Late rows"; issue 39).

The row oracles check that every late row arrives once; this one checks *when*. A row that becomes
visible at V inside a window ``w`` already delivered, at age A = V - w.to_ms, is due:

- at V, if A is at most the young age (4 frequencies plus 2 lags): every scheduled pass rechecks it;
- else once the window reaches the smallest recheck age >= A (`reconcile.recheck_ages`: at most
  1.5·A, and at most the horizon plus the lag).

It must be delivered by the end of the first *complete* scheduled pass of its dataset that starts
once it is due (`World.passes`: a pass is complete when the product records it, `mark_reconciled`;
a pass that failed, skipped the dataset for its backoff, or was paused records nothing, and the
promise moves to the next complete one). What the oracle reads is the simulated world's own
record: when the row became visible (`SimSource`), which part the Snowpipe loader loaded it from
(the window is in the part's name), when that part's first send reached the store
(`Oracles.landed`) or, if an operator's replace rewrote a part that carried it, when that part's
earlier body landed (`MemoryBucket.overwritten_rows`), and the export's frequency at each time (`SimExport.frequencies`).

Rows it does not time, counted by reason: rows visible before their window was first delivered
(they go out with the window itself, under the position's promises); rows whose predecessor pass
ran under another frequency (a frequency change moves the recheck ages: `reconcile.rechecked_now`
then rechecks a window the old ages had left at the latest by the next new age, about A/2 later);
and rows with no complete pass after their due time (an export deleted, or the world ended).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace
from typing import TYPE_CHECKING

from seqexport_dagster.contract.keys import parse_key
from seqexport_dagster.contract.window import MINUTE_MS, Window, iso_ms
from seqexport_dagster.delivery.reconcile import recheck_ages
from seqexport_dagster_tests.support.sim.loaders import Loaded, relative
from seqexport_dagster_tests.support.sim.model import SimExport

if TYPE_CHECKING:
    from seqexport_dagster_tests.support.sim.world import World


@dataclass
class DelayCheck:
    """What the oracle timed, over a seed: late rows checked against the bound, the largest delay
    after visibility it saw, and the rows it did not time, by reason."""

    timed: int = 0
    worst_delay_ms: int = 0
    #: The largest delivery delay over the row's age A at visibility (the bound is about 0.5).
    worst_ratio: float = 0.0
    untimed: Counter[str] = field(default_factory=Counter)


@lru_cache(maxsize=64)
def _ages(frequency: str, lag_ms: int, lateness_ms: int) -> tuple[int, ...]:
    return recheck_ages(SimpleNamespace(frequency=frequency, lag_ms=lag_ms), lateness_ms)  # type: ignore[arg-type]


def _due_age(ages: tuple[int, ...], age: int) -> int | None:
    """The window's age by which a row visible at ``age`` is due (None: past the horizon)."""
    if age <= ages[0]:
        return age
    i = bisect.bisect_left(ages, age)
    return ages[i] if i < len(ages) else None


def late_delays(
    world: World,
    e: SimExport,
    loaded: Loaded,
    owed: dict[tuple[str, str], int],
    first_writes: dict[str, dict[str, int]],
    check: DelayCheck,
) -> list[tuple[str, str]]:
    """(detail, row id) for each late row of ``e`` delivered after the bound; counts into ``check``."""
    lag_ms = world.store.get_export(e.export_id).lag_ms
    first_of_window: dict[tuple[str, Window], int] = {}
    window_of: dict[str, tuple[Window, int]] = {}  # "s3://bucket/key" -> (its window, its first write)
    for place in e.places:
        for key, at in first_writes.get(place.bucket, {}).items():
            rel = relative(place, key)
            parsed = parse_key(rel) if rel is not None else None
            if parsed is None or parsed.window is None or parsed.part is None:
                continue
            slot = (parsed.dataset, parsed.window)
            first_of_window[slot] = min(at, first_of_window.get(slot, at))
            window_of[f"s3://{place.bucket}/{key}"] = (parsed.window, at)
    out = []
    for dataset, rid in owed:
        row = world.source.rows[rid]
        parts = [window_of[w] for w in loaded.rows.get((dataset, rid), []) if w in window_of]
        if not parts:
            continue  # never loaded: the row oracles report it
        window, delivered = min(parts, key=lambda p: p[1])
        visible = row.inserted_ms
        age = visible - window.to_ms
        if age <= 0 or first_of_window[(dataset, window)] >= visible:
            continue  # not late for its window: delivered with the window itself
        # A part that carried it may have been rewritten since by an operator's replace, under its
        # name: the loaders, reading the bucket once a day, saw only the new body (seed 30000044).
        earlier = [world.buckets.get(p.bucket).overwritten_rows.get(rid) for p in e.places]
        delivered = min([delivered, *(t for t in earlier if t is not None)])
        passes = world.passes.get((e.export_id, dataset), [])
        starts = [s for s, _ in passes]
        i = bisect.bisect_left(starts, visible)
        due_pass, due = None, None
        while i < len(passes):
            start, _ = passes[i]
            due = _due_age(_ages(e.frequency_at(start), lag_ms, world.lateness_ms), age)
            if due is None:
                check.untimed["visible past the horizon"] += 1
                break
            if start - window.to_ms >= due:
                due_pass = i
                break
            i += 1
        if due_pass is None:
            if i >= len(passes):
                check.untimed["no complete pass after due"] += 1
            continue
        start, end = passes[due_pass]
        before = passes[due_pass - 1][0] if due_pass > 0 else None
        if before is not None and e.frequency_at(before) != e.frequency_at(start):
            check.untimed["frequency changed between the two passes"] += 1
            continue
        check.timed += 1
        delay = delivered - visible
        check.worst_delay_ms = max(check.worst_delay_ms, delay)
        check.worst_ratio = max(check.worst_ratio, delay / age)
        if delivered > end:
            out.append(
                (
                    f"{dataset} {rid} visible {iso_ms(visible)}, {age // MINUTE_MS} min after its window "
                    f"({iso_ms(window.from_ms)}, {iso_ms(window.to_ms)}] ended; due at age "
                    f"{(due or 0) // MINUTE_MS} min; the complete pass from {iso_ms(start)} to {iso_ms(end)} did not deliver it: "
                    f"delivered {iso_ms(delivered)}, {delay // MINUTE_MS} min after it became visible",
                    rid,
                )
            )
    return out
