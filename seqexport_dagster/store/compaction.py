"""Compaction: fold the windows, parts and run-log entries of old days into per-day summaries.

A day of one (export, dataset) is compacted only when nothing may still touch it:
- the whole day ends at or before the cutoff (now − `RETENTION_MS`, the longer of the history
  horizon and the reconciliation horizon), and the dataset's position is past it;
- every window attempt and run-log entry of that day started and finished before the cutoff, and
  none is still running (a backfill of an old day started recently keeps the day as it is).

Each day is one short transaction, re-checked inside it, and only the rows read there are deleted
(a part re-pointed by a concurrent attempt is kept), so compaction runs beside deliveries. Run it
again and it finds nothing more to do; a day touched again after it was compacted (a backfill)
is merged into its summary on a later pass. The windows of a summary are those whose latest
committed attempt is at its location, with that attempt's rows, parts and bytes: what
`verify --ledger` compares (`verify.ledger`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, Window, day_of, day_start_ms
from seqexport_dagster.progress import Advance, no_progress
from seqexport_dagster.store.records import COMMITTED, HISTORY_MS, PART_LANDED, PRUNE_AFTER_MS, RUNNING
from seqexport_dagster.store.tables import export_datasets, exports, parts, run_log, window_days, windows
from seqexport_dagster.store.window_days import decode_bounds, encode_bounds, md5_digest

#: History shows 14 days and reconciliation looks back at most 7: keep the longer, whole.
RETENTION_MS: Final = max(HISTORY_MS, PRUNE_AFTER_MS)


@dataclass(slots=True)
class CompactionReport:
    days: int = 0  # (export, dataset, day) groups folded
    skipped: int = 0  # groups left alone because something may still touch them
    windows: int = 0
    parts: int = 0
    run_log: int = 0
    summaries: int = 0  # summary rows written or merged into


@dataclass(slots=True)
class _Summary:
    windows: dict[Window, tuple[int, int, int]]  # window → (rows, parts, bytes)
    md5s: list[str]
    attempts: int = 0
    runs: int = 0


def cutoff_for(now_ms: int) -> int:
    """The first instant kept whole: days ending at or before it may be compacted."""
    return now_ms - RETENTION_MS


def _position_ok(conn: sa.Connection, export_id: str, dataset: str, day_end: int) -> bool:
    d = export_datasets
    positions = conn.execute(
        sa.select(d.c.position_ms).where(d.c.export_id == export_id, d.c.dataset == dataset, d.c.removed_at.is_(None))
    ).scalars()
    return all(p >= day_end for p in positions)


def _latest_committed(rows: Sequence[Any]) -> dict[Window, Any]:
    latest: dict[Window, Any] = {}
    for r in sorted(rows, key=lambda r: r.id):
        if r.status == COMMITTED:
            latest[Window(r.from_ms, r.to_ms)] = r
    return latest


def compact_day(
    conn: sa.Connection, export_id: str, dataset: str, day: dt.date, cutoff: int, now_ms: int
) -> CompactionReport | None:
    """Fold one (export, dataset, day) in the caller's transaction; None when it must stay."""
    start = day_start_ms(day)
    end = start + DAY_MS
    date = day.isoformat()
    if end > cutoff or not _position_ok(conn, export_id, dataset, end):
        return None
    w = windows
    rows = conn.execute(
        sa.select(w).where(w.c.export_id == export_id, w.c.dataset == dataset, w.c.from_ms >= start, w.c.from_ms < end)
    ).all()
    log = conn.execute(
        sa.select(run_log.c.id, run_log.c.status, run_log.c.started_at, run_log.c.finished_at).where(
            run_log.c.export_id == export_id, run_log.c.dataset == dataset, run_log.c.date == date
        )
    ).all()
    for r in [*rows, *log]:
        if r.status == RUNNING or r.started_at >= cutoff or (r.finished_at or r.started_at) >= cutoff:
            return None
    if any(r.to_ms > cutoff or r.date != date for r in rows):
        return None
    if not rows and not log:
        return CompactionReport()
    ids = [r.id for r in rows]
    part_rows = (
        conn.execute(
            sa.select(
                parts.c.id, parts.c.from_ms, parts.c.to_ms, parts.c.location, parts.c.part, parts.c.md5, parts.c.status
            ).where(parts.c.window_id.in_(ids))
        ).all()
        if ids
        else []
    )
    by_location: dict[str, _Summary] = {}
    for window, r in _latest_committed(rows).items():
        s = by_location.setdefault(r.location, _Summary({}, []))
        s.windows[window] = (r.rows, r.parts, r.bytes)
    for p in part_rows:
        s_ = by_location.get(p.location)
        if s_ is not None and Window(p.from_ms, p.to_ms) in s_.windows and p.status == PART_LANDED:
            s_.md5s.append(f"{p.from_ms}-{p.to_ms}/{p.part}:{p.md5 or ''}")
    primary = max(by_location, key=lambda loc: len(by_location[loc].windows), default="")
    by_location.setdefault(primary, _Summary({}, []))
    by_location[primary].attempts = len(rows)
    by_location[primary].runs = len(log)
    report = CompactionReport(days=1, windows=len(rows), parts=len(part_rows), run_log=len(log))
    for location, s in by_location.items():
        _merge(conn, export_id, dataset, date, location, s, now_ms)
        report.summaries += 1
    if part_rows:
        conn.execute(parts.delete().where(parts.c.id.in_([p.id for p in part_rows])))
    if ids:
        conn.execute(w.delete().where(w.c.id.in_(ids)))
    if log:
        conn.execute(run_log.delete().where(run_log.c.id.in_([e.id for e in log])))
    return report


def _merge(conn: sa.Connection, export_id: str, dataset: str, date: str, location: str, s: _Summary, now: int) -> None:
    """Write the summary, or merge it into the one already there (a day touched after compaction):
    windows it already holds keep their figures, new ones are added, the digest is chained."""
    t = window_days
    key = sa.and_(t.c.export_id == export_id, t.c.dataset == dataset, t.c.date == date, t.c.location == location)
    old = conn.execute(sa.select(t).where(key)).first()
    digest = md5_digest(s.md5s) if s.md5s else ""
    if old is None:
        first, last, count, bounds = encode_bounds(s.windows)
        conn.execute(
            t.insert().values(
                export_id=export_id,
                dataset=dataset,
                date=date,
                location=location,
                first_from_ms=first,
                last_to_ms=last,
                windows=count,
                bounds=bounds,
                parts=sum(v[1] for v in s.windows.values()),
                rows=sum(v[0] for v in s.windows.values()),
                bytes=sum(v[2] for v in s.windows.values()),
                md5_digest=digest,
                attempts=s.attempts,
                runs=s.runs,
                compacted_at=now,
            )
        )
        return
    held = set(decode_bounds(old.first_from_ms, old.last_to_ms, old.windows, old.bounds))
    new = {w: v for w, v in s.windows.items() if w not in held}
    first, last, count, bounds = encode_bounds(held | set(new))
    if digest and old.md5_digest:
        digest = md5_digest([old.md5_digest, digest])
    conn.execute(
        t.update()
        .where(t.c.id == old.id)
        .values(
            first_from_ms=first,
            last_to_ms=last,
            windows=count,
            bounds=bounds,
            parts=old.parts + sum(v[1] for v in new.values()),
            rows=old.rows + sum(v[0] for v in new.values()),
            bytes=old.bytes + sum(v[2] for v in new.values()),
            md5_digest=digest or old.md5_digest,
            attempts=old.attempts + s.attempts,
            runs=old.runs + s.runs,
            compacted_at=now,
        )
    )


def _fold(
    engine: sa.Engine, export_id: str, dataset: str, day: dt.date, cutoff: int, now_ms: int, total: CompactionReport
) -> None:
    with engine.begin() as conn:
        got = compact_day(conn, export_id, dataset, day, cutoff, now_ms)
    if got is None:
        total.skipped += 1
        return
    for name in ("days", "windows", "parts", "run_log", "summaries"):
        setattr(total, name, getattr(total, name) + getattr(got, name))


def compact(engine: sa.Engine, now_ms: int, *, progress: Advance = no_progress) -> CompactionReport:
    """Fold every day older than the horizon, oldest first, one (export, dataset, day) per transaction.

    Days are found along ``ix_windows_dataset_from`` (dataset, from_ms), one day at a time, then
    the run-log entries of days that never opened a window, per export.
    """
    cutoff = cutoff_for(now_ms)
    last_day = day_of(cutoff)  # the day holding the cutoff ends after it; every earlier one does not
    stop = day_start_ms(last_day)
    total = CompactionReport()
    w = windows
    with engine.connect() as conn:
        datasets = sorted(conn.execute(sa.select(export_datasets.c.dataset).distinct()).scalars())
    for dataset in datasets:
        after = -1
        while True:
            with engine.connect() as conn:
                first = conn.execute(
                    sa.select(sa.func.min(w.c.from_ms)).where(
                        w.c.dataset == dataset, w.c.from_ms > after, w.c.from_ms < stop
                    )
                ).scalar()
                if first is None:
                    break
                day = day_of(first)
                start = day_start_ms(day)
                exports_of_day = sorted(
                    conn.execute(
                        sa.select(w.c.export_id)
                        .where(w.c.dataset == dataset, w.c.from_ms >= start, w.c.from_ms < start + DAY_MS)
                        .distinct()
                    ).scalars()
                )
            for export_id in exports_of_day:
                _fold(engine, export_id, dataset, day, cutoff, now_ms, total)
            after = start + DAY_MS - 1
            progress(f"compacting {dataset}", total.days, None)
    # Run-log entries of days that opened no window (runs paused or deleted before their first
    # file), along ix_run_log_export_started, export by export.
    with engine.connect() as conn:
        export_ids = list(conn.execute(sa.select(exports.c.id).order_by(exports.c.id)).scalars())
    orphans = 0
    for export_id in export_ids:
        with engine.connect() as conn:
            groups = conn.execute(
                sa.select(run_log.c.dataset, run_log.c.date)
                .where(run_log.c.export_id == export_id, run_log.c.started_at < cutoff)
                .group_by(run_log.c.dataset, run_log.c.date)
            ).all()
        for r in groups:
            if r.date < last_day.isoformat():
                orphans += 1
                _fold(engine, export_id, r.dataset, dt.date.fromisoformat(r.date), cutoff, now_ms, total)
    progress("compacting run log", orphans, orphans)
    return total
