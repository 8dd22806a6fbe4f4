"""Per-day summaries of compacted history (``window_days``): the record, its bounds codec, its reads.

`store.compaction` writes them; `verify --ledger` (`verify.ledger`, `ledger_scope`), backfill
(`LedgerStore.committed_windows`) and the sensor's day totals read them for the days whose windows
are gone. A summary covers the windows of one (export, dataset, day) whose latest committed attempt
is at one location.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.window import Window
from seqexport_dagster.store.tables import window_days


@dataclass(frozen=True, slots=True)
class WindowDay:
    export_id: str
    dataset: str
    date: str
    location: str
    windows: tuple[Window, ...]
    parts: int
    rows: int
    bytes: int
    md5_digest: str
    attempts: int
    runs: int

    @property
    def first(self) -> Window | None:
        return self.windows[0] if self.windows else None

    @property
    def last(self) -> Window | None:
        return self.windows[-1] if self.windows else None


def encode_bounds(ws: Iterable[Window]) -> tuple[int | None, int | None, int, str | None]:
    """(first_from_ms, last_to_ms, count, bounds): ``bounds`` is None for one even, gap-free chain
    (what the schedule writes), else every window as ``from-to`` offsets from the first start."""
    ordered = sorted(set(ws))
    if not ordered:
        return None, None, 0, None
    first, last = ordered[0].from_ms, ordered[-1].to_ms
    step = ordered[0].to_ms - ordered[0].from_ms
    even = all(w.from_ms == first + i * step and w.to_ms == w.from_ms + step for i, w in enumerate(ordered))
    if even:
        return first, last, len(ordered), None
    return first, last, len(ordered), ",".join(f"{w.from_ms - first}-{w.to_ms - first}" for w in ordered)


def decode_bounds(first: int | None, last: int | None, count: int, bounds: str | None) -> tuple[Window, ...]:
    if first is None or last is None or count == 0:
        return ()
    if bounds is None:
        step = (last - first) // count
        return tuple(Window(first + i * step, first + (i + 1) * step) for i in range(count))
    out = []
    for item in bounds.split(","):
        a, b = item.split("-")
        out.append(Window(first + int(a), first + int(b)))
    return tuple(out)


def md5_digest(lines: Iterable[str]) -> str:
    """The digest of a day's part MD5s: SHA-256 over the sorted ``from-to/part:md5`` lines."""
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


def window_day_of(r: Any) -> WindowDay:
    return WindowDay(
        export_id=r.export_id,
        dataset=r.dataset,
        date=r.date,
        location=r.location,
        windows=decode_bounds(r.first_from_ms, r.last_to_ms, r.windows, r.bounds),
        parts=r.parts,
        rows=r.rows,
        bytes=r.bytes,
        md5_digest=r.md5_digest,
        attempts=r.attempts,
        runs=r.runs,
    )


def read_window_days(
    engine: sa.Engine, export_id: str, *, dataset: str | None = None, date: str | None = None
) -> list[WindowDay]:
    """The summaries of one export (optionally one dataset, one day), oldest day first."""
    t = window_days
    query = sa.select(t).where(t.c.export_id == export_id)
    if dataset is not None:
        query = query.where(t.c.dataset == dataset)
    if date is not None:
        query = query.where(t.c.date == date)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(t.c.dataset, t.c.date, t.c.location)).all()
    return [window_day_of(r) for r in rows]
