"""The windows ledger and the part ledger: every window attempt, every part, and the positions.

Invariants kept here:
- A position only moves in the transaction that commits its window in the ledger, and only forward
  along the chain (the committed window must start exactly at the current position).
- A part's intent is recorded before its PUT and marked landed after a 2xx; part numbers never shrink.
- A failure counts for backoff and shows as the dataset's last error until a window commits.

Size: the window and part ledgers share their invariants (one transaction per step); splitting them apart would split those.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import Window, backoff_ms
from seqexport_dagster.errors import sanitize_error
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.lifecycle_events import on_commit, on_failure, on_recovered
from seqexport_dagster.store.prepared import Prepared, change, fetch, first, one, scalar
from seqexport_dagster.store.records import (
    CANCELED,
    COMMITTED,
    FAILED,
    HISTORY_MS,
    PART_INTENT,
    PART_LANDED,
    RUNNING,
    WORKER_LOST,
    DatasetState,
    LedgerWindow,
    PartRecord,
    RunSummary,
    dataset_state_of,
    part_record_of,
)
from seqexport_dagster.store.tables import export_datasets, exports, part_record_columns, parts, windows


class LedgerStore:
    """What runs record and customers read back as history. Mixed into `ControlPlane`."""

    engine: sa.Engine

    @translate_errors
    def start_window(
        self, export_id: str, dataset: str, window: Window, *, run_id: str | None, location: str, now_ms: int
    ) -> int:
        """Open a ledger attempt. Attempts of the same (export, dataset) still marked running belong to
        a worker that died (SIGKILL, lost node): only one run per export writes at a time. They are
        closed as failed here, so history never shows a run as running forever."""
        with self.engine.begin() as conn:
            change(conn, _CLOSE_RUNNING, {"b_export_id": export_id, "b_dataset": dataset, "b_finished_at": now_ms})
            result = conn.execute(
                _START,
                {
                    "export_id": export_id,
                    "dataset": dataset,
                    "date": window.date_key,
                    "from_ms": window.from_ms,
                    "to_ms": window.to_ms,
                    "run_id": run_id,
                    "location": location,
                    "status": RUNNING,
                    "started_at": now_ms,
                },
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    @translate_errors
    def window_parts(
        self, export_id: str, dataset: str, window: Window, location: str, *, ids: bool = True
    ) -> list[PartRecord]:
        """The part ledger of one window at one location, by part number. ``ids=False`` leaves out
        the parts' ids (``PartRecord.ids`` is None): a 5M-row window's ids are ~17 MB packed, and the
        manifest loaded them all at the end of every window (issue 46: the peak RSS grew with it)."""
        query = _WINDOW_PARTS if ids else _WINDOW_PARTS_NO_IDS
        with self.engine.connect() as conn:
            rows = fetch(conn, query, _part_params(export_id, dataset, window, location))
        return [part_record_of(r) for r in rows]

    @translate_errors
    def record_part_intent(
        self,
        window_id: int,
        *,
        number: int,
        key: str,
        kind: str,
        last: tuple[str, ...] | None,
        rows: int,
        size: int,
        md5: str,
        ids: bytes | None,
        now_ms: int,
        body: bytes | None = None,
    ) -> None:
        """Record a part before its PUT: what it will hold and where its rows end.

        A number already in the ledger is only recorded again by an operator's replace (its row is
        then rewritten in place as a new intent), or by a re-send that created the object with a
        new cut. ``body``: the bytes, kept until the part lands, when a re-send could not cut them
        again (`LatePartsStore.pending_body`).
        """
        with self.engine.begin() as conn:
            w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
            values: dict[str, Any] = {
                "window_id": window_id,
                "key": key,
                "kind": kind,
                "status": PART_INTENT,
                "last_recorded_at": last[0] if last and len(last) > 1 else None,
                "last_id": last[-1] if last else None,
                "rows": rows,
                "bytes": size,
                "md5": md5,
                "ids": ids,
                "written_at": now_ms,
                "landed_at": None,
                "pending_body": body,
            }
            number_params = {**_window_row_params(w), "b_part": number}
            if change(conn, _REWRITE_PART, {**number_params, **values}) == 0:
                conn.execute(
                    _NEW_PART,
                    {
                        "export_id": w.export_id,
                        "dataset": w.dataset,
                        "from_ms": w.from_ms,
                        "to_ms": w.to_ms,
                        "location": w.location,
                        "part": number,
                        **values,
                    },
                )

    @translate_errors
    def mark_part_landed(self, window_id: int, number: int, now_ms: int) -> None:
        with self.engine.begin() as conn:
            w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
            change(conn, _MARK_LANDED, {**_window_row_params(w), "b_part": number, "b_landed_at": now_ms})

    @translate_errors
    def forget_part_intent(self, window_id: int, number: int) -> None:
        """Drop an intent whose PUT the store definitely refused: nothing landed under its name."""
        with self.engine.begin() as conn:
            w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
            change(conn, _FORGET_INTENT, {**_window_row_params(w), "b_part": number})

    @translate_errors
    def prune_part_ids(self, export_id: str, dataset: str, *, before_ms: int) -> int:
        """Drop the ids of committed windows ending before ``before_ms``: late-row detection never
        looks that far back, and the ids are the ledger's only per-row cost. Returns parts pruned."""
        with self.engine.begin() as conn:
            return change(conn, _PRUNE_IDS, {"b_export_id": export_id, "b_dataset": dataset, "b_before_ms": before_ms})

    @translate_errors
    def commit_window(
        self,
        window_id: int,
        *,
        rows: int,
        part_count: int,
        size: int,
        now_ms: int,
        snapshot_taken_at: int | None = None,
    ) -> bool:
        """Mark the window written and, if it continues the chain, advance the position.

        Returns whether the position moved. Both happen in one transaction: the position is never
        ahead of the ledger, and the ledger never claims a window the position has skipped.
        """
        with self.engine.begin() as conn:
            w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
            change(
                conn,
                _COMMIT,
                {
                    "b_window_id": window_id,
                    "b_rows": rows,
                    "b_parts": part_count,
                    "b_bytes": size,
                    "b_finished_at": now_ms,
                    "b_snapshot_taken_at": snapshot_taken_at,
                },
            )
            params = {"b_export_id": w.export_id, "b_dataset": w.dataset, "b_from_ms": w.from_ms, "b_to_ms": w.to_ms}
            advanced = change(conn, _ADVANCE, params)
            before = scalar(conn, _FAILURES, params)
            cleared = change(conn, _CLEAR_FAILURES, params)
            # Webhooks (issue 26): the day's completion and the recovery, in this same transaction.
            on_commit(
                conn, w, advanced=bool(advanced), failures_before=int(before or 0), cleared=bool(cleared), now_ms=now_ms
            )
        return bool(advanced)

    @translate_errors
    def fail_window(
        self, window_id: int, *, error: str, now_ms: int, count_failure: bool = True, canceled: bool = False
    ) -> DatasetState | None:
        """Record an unfinished attempt.

        ``canceled`` (pause, delete, destination change, terminated run) is not a failure: the ledger
        says canceled and backoff is untouched. A failure is always shown as failed; ``count_failure``
        only says whether it counts for backoff and the last error now (False while the run itself
        still retries a transient error, so one failing run counts once).
        """
        with self.engine.begin() as conn:
            w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
            if w.status == COMMITTED:
                # The commit went through and only its answer was lost (sim seed 4): the window is
                # delivered. Marked failed, reconciliation (committed windows only) would never
                # look at it again and its late rows would be lost.
                return None
            conn.execute(
                windows.update()
                .where(windows.c.id == window_id)
                .values(status=CANCELED if canceled else FAILED, error=sanitize_error(error), finished_at=now_ms)
            )
        if canceled:
            count_failure = False
        if not count_failure:
            return None
        return self.record_failure(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), error, now_ms)

    @translate_errors
    def record_failure(
        self, export_id: str, dataset: str, window: Window | None, error: str, now_ms: int
    ) -> DatasetState | None:
        with self.engine.begin() as conn:
            e = conn.execute(sa.select(exports.c.frequency).where(exports.c.id == export_id)).first()
            active = sa.and_(
                export_datasets.c.export_id == export_id,
                export_datasets.c.dataset == dataset,
                export_datasets.c.removed_at.is_(None),
            )
            d = conn.execute(sa.select(export_datasets).where(active)).first()
            if e is None or d is None:
                return None
            failures = d.failures + 1
            conn.execute(
                export_datasets.update()
                .where(active)
                .values(
                    failures=failures,
                    next_retry_at=now_ms + backoff_ms(e.frequency, failures),
                    last_error=sanitize_error(error),
                    last_error_at=now_ms,
                    last_error_from_ms=window.from_ms if window else None,
                    last_error_to_ms=window.to_ms if window else None,
                )
            )
            on_failure(
                conn, export_id, dataset, failures=failures, error=sanitize_error(error), window=window, now_ms=now_ms
            )
            d = conn.execute(sa.select(export_datasets).where(active)).one()
        return dataset_state_of(d)

    @translate_errors
    def ledger(
        self,
        export_id: str,
        *,
        dataset: str | None = None,
        since_ms: int | None = None,
        date: str | None = None,
    ) -> list[LedgerWindow]:
        params: dict[str, Any] = {"b_export_id": export_id}
        if dataset:
            params["b_dataset"] = dataset
        if since_ms is not None:
            params["b_since_ms"] = since_ms
        if date:
            params["b_date"] = date
        query = _ledger_query("b_dataset" in params, "b_since_ms" in params, "b_date" in params)
        with self.engine.connect() as conn:
            rows = fetch(conn, query, params)
        return [
            LedgerWindow(
                id=r.id,
                dataset=r.dataset,
                window=Window(r.from_ms, r.to_ms),
                run_id=r.run_id,
                status=r.status,
                rows=r.rows,
                parts=r.parts,
                bytes=r.bytes,
                error=r.error,
                started_at=r.started_at,
                finished_at=r.finished_at,
                snapshot_taken_at=r.snapshot_taken_at,
            )
            for r in rows
        ]

    @translate_errors
    def committed_at(self, export_id: str, dataset: str, window: Window, location: str) -> bool:
        """Whether the window was ever committed at ``location``."""
        with self.engine.connect() as conn:
            return (
                first(conn, _COMMITTED_AT, {**_window_params(export_id, dataset, window), "b_location": location})
                is not None
            )

    @translate_errors
    def committed_places(self, export_id: str, dataset: str, window: Window) -> set[str]:
        """The locations at which the window was ever committed (while its rows are not compacted)."""
        with self.engine.connect() as conn:
            found = fetch(conn, _COMMITTED_PLACES, _window_params(export_id, dataset, window))
        return {r.location for r in found}

    @translate_errors
    def last_attempt_place(self, export_id: str, dataset: str, window: Window) -> str | None:
        """The location of the window's latest attempt, whatever its outcome (None: never attempted)."""
        with self.engine.connect() as conn:
            return scalar(conn, _LAST_ATTEMPT_PLACE, _window_params(export_id, dataset, window))  # type: ignore[no-any-return]

    @translate_errors
    def settle_error(self, export_id: str, dataset: str, window: Window, now_ms: int) -> bool:
        """Clear the dataset's failures if its last error names ``window``, which nothing will
        deliver again: a snapshot day owed by a failed replace at a place the export has since left
        (sim seed 10001613). Like a commit that clears them, a long streak sends ``export.recovered``.
        Returns whether it cleared them."""
        with self.engine.begin() as conn:
            d = export_datasets.c
            named = sa.and_(
                d.export_id == export_id,
                d.dataset == dataset,
                d.removed_at.is_(None),
                d.last_error_from_ms == window.from_ms,
                d.last_error_to_ms == window.to_ms,
            )
            before = conn.execute(sa.select(d.failures).where(named)).scalar()
            cleared = conn.execute(export_datasets.update().where(named).values(**_NO_FAILURE)).rowcount
            if cleared:
                on_recovered(conn, export_id, dataset, failures_before=int(before or 0), now_ms=now_ms)
        return bool(cleared)

    def history(self, export_id: str, now_ms: int) -> list[RunSummary]:
        """Every run of the last 14 days, newest first, as the customer sees it."""
        runs: dict[str, list[LedgerWindow]] = {}
        for w in self.ledger(export_id, since_ms=now_ms - HISTORY_MS):
            runs.setdefault(w.run_id or f"window-{w.id}", []).append(w)
        summaries = []
        for run_id, ws in runs.items():
            statuses = {w.status for w in ws}
            status = next(s for s in (RUNNING, FAILED, CANCELED, COMMITTED) if s in statuses or s == COMMITTED)
            errors = [w.error for w in ws if w.error]
            finished = [w.finished_at for w in ws if w.finished_at is not None]
            summaries.append(
                RunSummary(
                    run_id=run_id,
                    started_at=min(w.started_at for w in ws),
                    finished_at=max(finished) if finished and RUNNING not in statuses else None,
                    status=status,
                    datasets=tuple(sorted({w.dataset for w in ws})),
                    windows=sum(1 for w in ws if w.status == COMMITTED),
                    rows=sum(w.rows for w in ws if w.status == COMMITTED),
                    files=sum(w.parts for w in ws if w.status == COMMITTED),
                    bytes=sum(w.bytes for w in ws if w.status == COMMITTED),
                    error=errors[-1] if errors else None,
                )
            )
        return sorted(summaries, key=lambda s: s.started_at, reverse=True)


# The statements of every part and window, built once: building a statement and its cache key
# costs more Python than SQLite takes to run it (issue 40: building statements and their cache keys
# took a quarter of the simulator's CPU, most of it in the calls below). A statement built once
# keeps its cache key, so each call is a lookup in SQLAlchemy's compiled cache; `Prepared` also
# compiles it once per database and runs it on the driver's cursor. Parameters are prefixed (``b_``) so they never clash
# with a column name: an INSERT or UPDATE executed with a dict takes its column values from the
# keys that name columns, and the ``b_`` ones fill the WHERE clause.
_WINDOW_BY_ID = Prepared(sa.select(windows).where(windows.c.id == sa.bindparam("b_window_id")))
_PART_OF_WINDOW = sa.and_(
    parts.c.export_id == sa.bindparam("b_export_id"),
    parts.c.dataset == sa.bindparam("b_dataset"),
    parts.c.from_ms == sa.bindparam("b_from_ms"),
    parts.c.to_ms == sa.bindparam("b_to_ms"),
    parts.c.location == sa.bindparam("b_location"),
)
_WINDOW_PARTS = Prepared(sa.select(*part_record_columns).where(_PART_OF_WINDOW).order_by(parts.c.part))
_WINDOW_PARTS_NO_IDS = Prepared(
    sa.select(*(sa.null().label("ids") if c.name == "ids" else c for c in part_record_columns))
    .where(_PART_OF_WINDOW)
    .order_by(parts.c.part)
)
_MARK_LANDED = Prepared(
    parts.update()
    .where(_PART_OF_WINDOW, parts.c.part == sa.bindparam("b_part"))
    .values(status=PART_LANDED, landed_at=sa.bindparam("b_landed_at"), pending_body=None)
)
#: `record_part_intent`: the part's columns come with the call's parameters.
_REWRITE_PART = Prepared(parts.update().where(_PART_OF_WINDOW, parts.c.part == sa.bindparam("b_part")))
_NEW_PART = parts.insert()
_FORGET_INTENT = Prepared(
    parts.delete().where(_PART_OF_WINDOW, parts.c.part == sa.bindparam("b_part"), parts.c.status == PART_INTENT)
)
_CLOSE_RUNNING = Prepared(
    windows.update()
    .where(
        windows.c.export_id == sa.bindparam("b_export_id"),
        windows.c.dataset == sa.bindparam("b_dataset"),
        windows.c.status == RUNNING,
    )
    .values(status=FAILED, error=WORKER_LOST, finished_at=sa.bindparam("b_finished_at"))
)
#: `start_window`: the attempt's columns come with the call's parameters.
_START = windows.insert()
_PRUNE_IDS = Prepared(
    parts.update()
    .where(
        parts.c.export_id == sa.bindparam("b_export_id"),
        parts.c.dataset == sa.bindparam("b_dataset"),
        parts.c.to_ms < sa.bindparam("b_before_ms"),
        parts.c.ids.is_not(None),
        sa.select(windows.c.id)
        .where(
            windows.c.export_id == parts.c.export_id,
            windows.c.dataset == parts.c.dataset,
            windows.c.from_ms == parts.c.from_ms,
            windows.c.to_ms == parts.c.to_ms,
            windows.c.location == parts.c.location,
            windows.c.status == COMMITTED,
        )
        .exists(),
    )
    .values(ids=None)
)
_COMMIT = Prepared(
    windows.update()
    .where(windows.c.id == sa.bindparam("b_window_id"))
    .values(
        status=COMMITTED,
        rows=sa.bindparam("b_rows"),
        parts=sa.bindparam("b_parts"),
        bytes=sa.bindparam("b_bytes"),
        finished_at=sa.bindparam("b_finished_at"),
        error=None,
        snapshot_taken_at=sa.bindparam("b_snapshot_taken_at"),
    )
)


def _failing_elsewhere() -> sa.ColumnElement[bool]:
    """The dataset's last error is about another window, disjoint from the committed one
    (``b_from_ms``, ``b_to_ms``: a late-row window behind the position, the due window while an
    older one is rewritten, or another snapshot day: sim seed 5000's failed replace of a day was
    hidden by the next day's commit): that error stays until its own window commits, so
    undelivered rows are never hidden."""
    d = export_datasets.c
    return sa.and_(
        d.last_error_from_ms.is_not(None),
        d.last_error_to_ms.is_not(None),
        sa.or_(d.last_error_to_ms <= sa.bindparam("b_from_ms"), d.last_error_from_ms >= sa.bindparam("b_to_ms")),
    )


#: `commit_window`'s statements on the committed window's dataset (``b_export_id``, ``b_dataset``).
_ACTIVE_DATASET = sa.and_(
    export_datasets.c.export_id == sa.bindparam("b_export_id"),
    export_datasets.c.dataset == sa.bindparam("b_dataset"),
    export_datasets.c.removed_at.is_(None),
)
_ADVANCE = Prepared(
    export_datasets.update()
    .where(_ACTIVE_DATASET, export_datasets.c.position_ms == sa.bindparam("b_from_ms"))
    .values(position_ms=sa.bindparam("b_to_ms"))
)
_FAILURES = Prepared(sa.select(export_datasets.c.failures).where(_ACTIVE_DATASET))
#: A dataset's failure columns as a success or a settled error leaves them.
_NO_FAILURE: Final[dict[str, Any]] = {
    "failures": 0,
    "next_retry_at": None,
    "last_error": None,
    "last_error_at": None,
    "last_error_from_ms": None,
    "last_error_to_ms": None,
}
_CLEAR_FAILURES = Prepared(
    export_datasets.update().where(_ACTIVE_DATASET, sa.not_(_failing_elsewhere())).values(**_NO_FAILURE)
)
#: Attempts (`windows` rows) of one window, at any place.
_OF_WINDOW = sa.and_(
    windows.c.export_id == sa.bindparam("b_export_id"),
    windows.c.dataset == sa.bindparam("b_dataset"),
    windows.c.from_ms == sa.bindparam("b_from_ms"),
    windows.c.to_ms == sa.bindparam("b_to_ms"),
)
_COMMITTED_AT = Prepared(
    sa.select(windows.c.id)
    .where(_OF_WINDOW, windows.c.location == sa.bindparam("b_location"), windows.c.status == COMMITTED)
    .limit(1)
)
_COMMITTED_PLACES = Prepared(sa.select(windows.c.location).where(_OF_WINDOW, windows.c.status == COMMITTED).distinct())
_LAST_ATTEMPT_PLACE = Prepared(sa.select(windows.c.location).where(_OF_WINDOW).order_by(windows.c.id.desc()).limit(1))


@functools.cache
def _ledger_query(by_dataset: bool, by_since: bool, by_date: bool) -> Prepared:
    """`LedgerStore.ledger`'s statement for one combination of filters, built once."""
    query = sa.select(windows).where(windows.c.export_id == sa.bindparam("b_export_id"))
    if by_dataset:
        query = query.where(windows.c.dataset == sa.bindparam("b_dataset"))
    if by_since:
        query = query.where(windows.c.started_at >= sa.bindparam("b_since_ms"))
    if by_date:
        query = query.where(windows.c.date == sa.bindparam("b_date"))
    return Prepared(query.order_by(windows.c.id))


def _window_params(export_id: str, dataset: str, window: Window) -> dict[str, Any]:
    """The parameters of `_OF_WINDOW`."""
    return {"b_export_id": export_id, "b_dataset": dataset, "b_from_ms": window.from_ms, "b_to_ms": window.to_ms}


def _part_params(export_id: str, dataset: str, window: Window, location: str) -> dict[str, Any]:
    """The parameters of `_PART_OF_WINDOW`."""
    return {
        "b_export_id": export_id,
        "b_dataset": dataset,
        "b_from_ms": window.from_ms,
        "b_to_ms": window.to_ms,
        "b_location": location,
    }


def _window_row_params(w: Any) -> dict[str, Any]:
    """The parameters of `_PART_OF_WINDOW` for the parts of attempt ``w`` (a `windows` row)."""
    return {
        "b_export_id": w.export_id,
        "b_dataset": w.dataset,
        "b_from_ms": w.from_ms,
        "b_to_ms": w.to_ms,
        "b_location": w.location,
    }
