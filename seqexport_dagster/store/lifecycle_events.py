"""Which state changes become webhook events, decided inside the transaction that makes them.

- `on_commit`: a committed window that moved its dataset's position to a UTC midnight completed that
  dataset-day at this export (windows never cross midnight and positions only move along the chain,
  so every earlier window of the day is committed: its parts, and for the snapshot ``_SUCCESS``,
  have landed). ``dataset.day_complete`` carries the day's objects, rows and bytes, once per
  (export, dataset, day). A commit that clears a streak of at least an endpoint's ``failing_after``
  failures sends it ``export.recovered`` (it had been sent ``export.failing``), as does `on_recovered`
  (failures cleared without a commit).
- `on_failure`: the failure that brings a dataset's consecutive failures to an endpoint's
  ``failing_after`` (default 3) sends it ``export.failing`` (once per streak: the count only grows
  until a commit resets it).
- `on_status`: pause and delete.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.keys import SNAPSHOT_DATASET, success_key
from seqexport_dagster.contract.window import DAY_MS, day_of, day_start, iso_ms
from seqexport_dagster.store.outbox import emit
from seqexport_dagster.store.records import COMMITTED, DELETED, PAUSED
from seqexport_dagster.store.tables import exports, windows
from seqexport_dagster.store.webhook_records import (
    DAY_COMPLETE,
    EXPORT_DELETED,
    EXPORT_FAILING,
    EXPORT_PAUSED,
    EXPORT_RECOVERED,
    MAX_FAILING_AFTER,
)


def _export(conn: sa.Connection, export_id: str) -> Any:
    return conn.execute(_EXPORT, {"b_export_id": export_id}).first()


# Built once (every commit reads its export): building a statement and its cache key costs more
# Python than SQLite takes to run it.
_EXPORT = sa.select(exports.c.account_id, exports.c.bucket, exports.c.prefix, exports.c.provider).where(
    exports.c.id == sa.bindparam("b_export_id")
)


def _day_totals() -> sa.Select[Any]:
    """The day's windows (``b_start`` to ``b_end``), each by its latest committed attempt."""
    latest = (
        sa.select(sa.func.max(windows.c.id).label("id"))
        .where(
            windows.c.export_id == sa.bindparam("b_export_id"),
            windows.c.dataset == sa.bindparam("b_dataset"),
            windows.c.from_ms >= sa.bindparam("b_start"),
            windows.c.from_ms < sa.bindparam("b_end"),
            windows.c.status == COMMITTED,
        )
        .group_by(windows.c.from_ms, windows.c.to_ms)
    ).subquery()
    return sa.select(
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(windows.c.parts), 0),
        sa.func.coalesce(sa.func.sum(windows.c.rows), 0),
        sa.func.coalesce(sa.func.sum(windows.c.bytes), 0),
        sa.func.min(windows.c.from_ms),
    ).where(windows.c.id.in_(sa.select(latest.c.id)))


_DAY_TOTALS = _day_totals()


def on_commit(conn: sa.Connection, w: Any, *, advanced: bool, failures_before: int, cleared: bool, now_ms: int) -> None:
    """``w`` is the committed window's row; ``cleared``: its commit reset the dataset's failures."""
    recovered = cleared and failures_before > 0
    day_complete = advanced and w.to_ms % DAY_MS == 0
    if not (recovered or day_complete):
        return  # most commits: nothing to send, so the export is not read
    e = _export(conn, w.export_id)
    if e is None:
        return
    if recovered:
        _recovered(conn, e, w.export_id, w.dataset, failures_before, now_ms)
    if day_complete:
        _day_complete(conn, w, e, now_ms)


def on_recovered(conn: sa.Connection, export_id: str, dataset: str, *, failures_before: int, now_ms: int) -> None:
    """The dataset's failures were cleared without a commit (`ControlPlane.settle_error`)."""
    e = _export(conn, export_id)
    if e is not None:
        _recovered(conn, e, export_id, dataset, failures_before, now_ms)


def _recovered(conn: sa.Connection, e: Any, export_id: str, dataset: str, failures_before: int, now_ms: int) -> None:
    if failures_before > 0:
        emit(
            conn,
            account_id=e.account_id,
            kind=EXPORT_RECOVERED,
            export_id=export_id,
            now_ms=now_ms,
            data={"export_id": export_id, "dataset": dataset, "failures": failures_before},
            wants=lambda failing_after: failures_before >= failing_after,
        )


def _day_complete(conn: sa.Connection, w: Any, e: Any, now_ms: int) -> None:
    day = day_of(w.from_ms)
    start = day_start(w.from_ms)
    totals = conn.execute(
        _DAY_TOTALS, {"b_export_id": w.export_id, "b_dataset": w.dataset, "b_start": start, "b_end": start + DAY_MS}
    ).one()
    folder = "/".join(p for p in (e.prefix, w.dataset, f"date={day.isoformat()}") if p) + "/"
    data: dict[str, Any] = {
        "export_id": w.export_id,
        "dataset": w.dataset,
        "date": day.isoformat(),
        "bucket": e.bucket,
        "prefix": e.prefix,
        "folder": folder,
        "from": iso_ms(int(totals[4]) if totals[4] is not None else w.from_ms),
        "to": iso_ms(w.to_ms),
        "windows": int(totals[0]),
        # What a listing of ``folder`` shows, as the docs say: a snapshot day's ``_SUCCESS`` counts
        # (issue 47: it was left out), so a customer's count of the folder matches.
        "objects": int(totals[1]) + (1 if w.dataset == SNAPSHOT_DATASET else 0),
        "rows": int(totals[2]),
        "bytes": int(totals[3]),
        "success_key": success_key(e.prefix, day) if w.dataset == SNAPSHOT_DATASET else None,
    }
    emit(
        conn,
        account_id=e.account_id,
        kind=DAY_COMPLETE,
        export_id=w.export_id,
        now_ms=now_ms,
        data=data,
        dedup_key=f"day_complete:{w.export_id}:{w.dataset}:{day.isoformat()}",
    )


def on_failure(
    conn: sa.Connection, export_id: str, dataset: str, *, failures: int, error: str, window: Any, now_ms: int
) -> None:
    if failures > MAX_FAILING_AFTER:
        return  # no endpoint waits that long: no query on every later failure of a long streak
    e = _export(conn, export_id)
    if e is None:
        return
    emit(
        conn,
        account_id=e.account_id,
        kind=EXPORT_FAILING,
        export_id=export_id,
        now_ms=now_ms,
        data={
            "export_id": export_id,
            "dataset": dataset,
            "failures": failures,
            "error": error,
            "window": None if window is None else {"from": iso_ms(window.from_ms), "to": iso_ms(window.to_ms)},
        },
        wants=lambda failing_after: failures == failing_after,
    )


def on_status(conn: sa.Connection, export_id: str, status: str, now_ms: int) -> None:
    kinds: dict[str, str] = {PAUSED: EXPORT_PAUSED, DELETED: EXPORT_DELETED}
    if status not in kinds:
        return
    e = _export(conn, export_id)
    if e is None:
        return
    emit(
        conn,
        account_id=e.account_id,
        kind=kinds[status],
        export_id=export_id,
        now_ms=now_ms,
        data={"export_id": export_id, "status": status},
    )
