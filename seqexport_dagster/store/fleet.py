"""Queries over every export at once, for the scheduler sensor: a fixed number per tick.

The per-export methods of `ControlPlane` serve a run (one export); a tick over 3,000 exports must
not issue 3,000 queries, so what the sensor needs about the whole fleet is read here in bulk.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import parse_format
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, Window, day_start_ms
from seqexport_dagster.store.prepared import Prepared, fetch
from seqexport_dagster.store.records import COMMITTED, DELETED, DatasetState, ExportRecord
from seqexport_dagster.store.tables import WINDOW_OPEN, export_datasets, exports, windows


@dataclass(frozen=True, slots=True)
class DayTotals:
    """One dataset's day over all exports: the latest committed attempt of each window."""

    exports: int
    windows: int
    rows: int
    files: int
    bytes: int


def unfinished_attempts(engine: sa.Engine) -> dict[tuple[str, str], Window]:
    """(export, dataset) → the latest attempt starting at the position, when it is not committed.

    The planner retries such a window with its exact bounds; the sensor must know it too, or it
    would not request a retry whose bounds end off the grid (an "export now" that failed).
    """
    with engine.connect() as conn:
        return {(r.export_id, r.dataset): Window(r.from_ms, r.to_ms) for r in fetch(conn, _UNFINISHED)}


def _unfinished_query() -> sa.Select[Any]:
    w, d = windows, export_datasets
    later = windows.alias("later")
    # The latest attempt at the position, when it is not committed: an attempt there that is not
    # committed and has no later one at the same place. The status test is the predicate of
    # ``ix_windows_open`` word for word (a literal, not a parameter), so both databases read only
    # that small index, not one probe per export and dataset (issue 29).
    superseded = sa.exists().where(
        later.c.export_id == w.c.export_id,
        later.c.dataset == w.c.dataset,
        later.c.from_ms == w.c.from_ms,
        later.c.id > w.c.id,
    )
    return (
        sa.select(w.c.export_id, w.c.dataset, w.c.from_ms, w.c.to_ms)
        .select_from(
            w.join(
                d,
                sa.and_(
                    d.c.export_id == w.c.export_id,
                    d.c.dataset == w.c.dataset,
                    d.c.position_ms == w.c.from_ms,
                    d.c.removed_at.is_(None),
                ),
            )
        )
        .where(WINDOW_OPEN, ~superseded)
    )


#: Built once: the sensor asks every tick, and building a statement (and its cache key) costs more
#: Python than running it on a small fleet (the simulator's profile: about half of this call).
_UNFINISHED = Prepared(_unfinished_query())


def _latest_committed(dataset: str, from_ms: int, to_ms: int, only: list[str] | None = None) -> sa.Subquery:
    """Committed attempts of ``dataset``'s windows starting in ``[from_ms, to_ms)`` (of the exports
    ``only``, when given), ranked newest first per window (``rn`` 1 is the one that counts: a
    re-delivery or a move supersedes the earlier).

    One pass over ``ix_windows_dataset_from`` and a sort: the former ``max(id)`` + ``IN`` shape read
    every window a second time through the primary key, 3.2x the time on PostgreSQL (issue 29).
    """
    w = windows
    rank = sa.func.row_number().over(partition_by=(w.c.export_id, w.c.from_ms, w.c.to_ms), order_by=w.c.id.desc())
    conditions = [w.c.dataset == dataset, w.c.from_ms >= from_ms, w.c.from_ms < to_ms, w.c.status == COMMITTED]
    if only is not None:
        conditions.append(w.c.export_id.in_(only))
    return sa.select(w.c.export_id, w.c.rows, w.c.parts, w.c.bytes, rank.label("rn")).where(*conditions).subquery()


def day_totals(
    engine: sa.Engine, dataset: str, days: Iterable[dt.date], export_ids: Iterable[str] | None = None
) -> dict[dt.date, DayTotals]:
    """Totals of each day's folder of one dataset, over every export or only ``export_ids`` (one
    query per day; a day of 3,000 exports at 15 minutes is 288,000 windows, 0.66 s on PostgreSQL,
    which is why the sensor leaves it to a day-cell run, `defs.day_cells`)."""
    only = None if export_ids is None else sorted(set(export_ids))
    out: dict[dt.date, DayTotals] = {}
    with engine.connect() as conn:
        for day in days:
            if only == []:
                out[day] = DayTotals(0, 0, 0, 0, 0)
                continue
            start = day_start_ms(day)
            s = _latest_committed(dataset, start, start + DAY_MS, only)
            r = conn.execute(
                sa.select(
                    sa.func.count(sa.distinct(s.c.export_id)),
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(s.c.rows), 0),
                    sa.func.coalesce(sa.func.sum(s.c.parts), 0),
                    sa.func.coalesce(sa.func.sum(s.c.bytes), 0),
                ).where(s.c.rn == 1)
            ).one()
            out[day] = DayTotals(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]))
    return out


def changed_since(engine: sa.Engine, since_ms: int) -> tuple[set[str], int]:
    """Exports edited, or with a window attempt started or finished, after ``since_ms``.

    Returns them with the newest such time seen, the ``since_ms`` of the next call (a watermark
    from the data itself, so a frozen or skewed clock neither repeats nor skips changes).
    """
    w, e = windows, exports
    with engine.connect() as conn:
        edited = conn.execute(sa.select(e.c.id, e.c.updated_at).where(e.c.updated_at > since_ms)).all()
        started = conn.execute(
            sa.select(w.c.export_id, sa.func.max(w.c.started_at))
            .where(w.c.started_at > since_ms)
            .group_by(w.c.export_id)
        ).all()
        finished = conn.execute(
            sa.select(w.c.export_id, sa.func.max(w.c.finished_at))
            .where(w.c.finished_at > since_ms)
            .group_by(w.c.export_id)
        ).all()
    rows = [*edited, *started, *finished]
    return {r[0] for r in rows}, max((int(r[1]) for r in rows), default=since_ms)


def first_export_day(engine: sa.Engine) -> dt.date | None:
    """The UTC day of the earliest dataset start: the first partition of the dataset assets."""
    with engine.connect() as conn:
        first = conn.execute(sa.select(sa.func.min(export_datasets.c.added_at))).scalar()
    return None if first is None else dt.datetime.fromtimestamp(first / 1000, tz=dt.UTC).date()


#: The columns `ExportRecord` is built from (everything but the sealed secret), in its field order.
_EXPORT_COLUMNS: Final = (
    "id", "account_id", "provider", "bucket", "region", "endpoint", "prefix", "access_key_id", "frequency",
    "lag_ms", "status", "config_version", "destination_version", "export_now_at", "created_at", "updated_at",
    "deleted_at", "sse", "kms_key_id", "role_arn", "external_id", "format",
)  # fmt: skip
_DATASET_COLUMNS: Final = (
    "export_id", "dataset", "added_at", "position_ms", "failures", "next_retry_at", "last_error",
    "last_error_at", "last_error_from_ms", "last_error_to_ms", "reconciled_at",
)  # fmt: skip
# Constants only (no parameter), so the same text runs on SQLite and PostgreSQL through the DBAPI cursor.
_EXPORTS_SQL: Final = (
    f"SELECT {', '.join(_EXPORT_COLUMNS)} FROM exports WHERE status <> '{DELETED.value}' ORDER BY created_at, id"
)
_DATASETS_SQL: Final = f"SELECT {', '.join(_DATASET_COLUMNS)} FROM export_datasets WHERE removed_at IS NULL ORDER BY id"
_ORDER: Final = {name: i for i, name in enumerate(DATASETS)}

Row = tuple[Any, ...]


#: Per control plane (its URL, password masked): each export's rows at the last read and the record built from them.
_built: dict[str, dict[tuple[Row, tuple[Row, ...]], ExportRecord]] = {}
_lock = threading.Lock()
_KEPT_PLANES: Final = 4


def _state_of(r: Row) -> DatasetState:
    window = Window(r[8], r[9]) if r[8] is not None and r[9] is not None else None
    return DatasetState(r[1], r[2], r[3], r[4], r[5], r[6], r[7], window, r[10])


def _record_of(r: Row, rows: Sequence[Row]) -> ExportRecord:
    states = sorted((_state_of(d) for d in rows), key=lambda s: _ORDER[s.dataset])
    return ExportRecord(
        id=r[0], account_id=r[1], provider=r[2], bucket=r[3], region=r[4], endpoint=r[5], prefix=r[6],
        access_key_id=r[7], frequency=r[8], lag_ms=r[9], status=r[10], config_version=r[11],
        destination_version=r[12], export_now_at=r[13], created_at=r[14], updated_at=r[15], deleted_at=r[16],
        datasets=tuple(states), sse=r[17], kms_key_id=r[18], role_arn=r[19], external_id=r[20],
        format=parse_format(r[21]),
    )  # fmt: skip


def fleet_exports(engine: sa.Engine) -> list[ExportRecord]:
    """Every export that is not deleted, equal to `ExportStore.list_exports()`, for the sensor's tick.

    The same two queries, but only the columns a record holds (not the sealed secret), fetched as
    plain DBAPI tuples; and a record is rebuilt only when one of its rows differs from the last read
    of this control plane in this process (the daemon's code server evaluates every tick in one
    process). A record is a pure function of its rows, so reusing it is safe whatever changed the
    rows; a tick costs two queries plus a comparison per export, and building a record only for
    exports whose position, failures, status or settings moved (issue 29: at 10,000 exports building
    every record was about 0.45 of the slot tick's 1.1 CPU-s).
    """
    with engine.connect() as conn:
        cursor = conn.connection.cursor()
        try:
            cursor.execute(_EXPORTS_SQL)
            export_rows = [tuple(r) for r in cursor.fetchall()]
            cursor.execute(_DATASETS_SQL)
            dataset_rows = [tuple(r) for r in cursor.fetchall()]
        finally:
            cursor.close()
    by_export: dict[str, list[Row]] = {}
    for d in dataset_rows:
        by_export.setdefault(d[0], []).append(d)
    key = str(engine.url)
    with _lock:
        last = _built.get(key, {})
    built: dict[tuple[Row, tuple[Row, ...]], ExportRecord] = {}
    records: list[ExportRecord] = []
    for r in export_rows:
        rows = (r, tuple(by_export.get(r[0], ())))
        record = last.get(rows)
        if record is None:
            record = _record_of(r, rows[1])
        built[rows] = record
        records.append(record)
    with _lock:
        _built.pop(key, None)
        _built[key] = built
        while len(_built) > _KEPT_PLANES:  # a process serving many control planes (tests) keeps the latest
            _built.pop(next(iter(_built)))
    return records
