"""The run log: how each run was started and how it ended, per (run, export, dataset).

Written by the Dagster wiring around `Runner.run_day`; read by `seqexport_dagster.management.history`. Kept
apart from the windows ledger (`store.ledger`) on purpose: the ledger records what reached the
bucket, the run log what was asked for and what Dagster reported, including runs that never
opened a window (paused or deleted before their first file).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.store.tables import run_log

SCHEDULED: Final = "scheduled"
EXPORT_NOW: Final = "export now"
BACKFILL: Final = "backfill"
MANUAL: Final = "manual"
TRIGGERS: Final = (SCHEDULED, EXPORT_NOW, BACKFILL, MANUAL)
#: End states, in the words of Dagster's run page.
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
CANCELED: Final = "canceled"


@dataclass(frozen=True, slots=True)
class RunLogEntry:
    run_id: str
    export_id: str
    dataset: str
    date: str
    trigger: str
    status: str
    message: str | None
    started_at: int
    finished_at: int | None


#: The control plane is away or the table is not migrated yet. A history note is never worth failing
#: a customer's export over: the outcome is in the ledger and in Dagster, so only the note is lost.
_UNAVAILABLE: Final = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.ProgrammingError)


def _entry(
    run_id: str, export_id: str, dataset: str, date: str, trigger: str, status: str, now_ms: int
) -> dict[str, Any]:
    """One insert row: an entry opened at ``now_ms`` (closed at once unless ``status`` is running)."""
    return {
        "run_id": run_id,
        "export_id": export_id,
        "dataset": dataset,
        "date": date,
        "trigger": trigger,
        "status": status,
        "started_at": now_ms,
        "finished_at": None if status == RUNNING else now_ms,
    }


# Built once (every dataset of every run opens and closes its entry): building a statement and its
# cache key costs more Python than SQLite takes to run it. ``b_`` parameters fill the WHERE clause;
# an UPDATE's other parameters name the columns it sets.
#: The entry of one (run, export, dataset).
_ONE: Final = sa.and_(
    run_log.c.run_id == sa.bindparam("b_run_id"),
    run_log.c.export_id == sa.bindparam("b_export_id"),
    run_log.c.dataset == sa.bindparam("b_dataset"),
)
_FIND_ONE: Final = sa.select(run_log.c.id).where(_ONE)
_REOPEN_ONE: Final = run_log.update().where(_ONE).values(status=RUNNING, finished_at=None)
_CLOSE_ONE: Final = run_log.update().where(_ONE)
#: The entries of a run (``b_run_id``) that nothing has closed yet.
_CLOSE_STILL_OPEN: Final = run_log.update().where(
    run_log.c.run_id == sa.bindparam("b_run_id"), run_log.c.status == RUNNING
)


def _one(run_id: str, export_id: str, dataset: str) -> dict[str, Any]:
    """The parameters of `_ONE`."""
    return {"b_run_id": run_id, "b_export_id": export_id, "b_dataset": dataset}


def _close(
    conn: sa.Connection, close: sa.Update, where: dict[str, Any], status: str, now_ms: int, message: str | None
) -> int:
    """End the entries ``close`` (`_CLOSE_ONE` or `_CLOSE_STILL_OPEN`) picks with ``where``."""
    ended = conn.execute(close, {**where, "status": status, "message": message, "finished_at": now_ms})
    return int(ended.rowcount or 0)


#: The table's columns in `RunLogEntry`'s field order, so a row builds an entry as it is.
_ENTRY_COLUMNS: Final = tuple(run_log.c[f.name] for f in fields(RunLogEntry))


class RunLog:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def start(self, run_id: str, export_id: str, dataset: str, date: str, trigger: str, now_ms: int) -> None:
        """Open (or, on a step retry, reopen) the entry of this run's dataset."""
        where = _one(run_id, export_id, dataset)
        try:
            with self.engine.begin() as conn:
                if conn.execute(_FIND_ONE, where).first():
                    conn.execute(_REOPEN_ONE, where)
                else:
                    conn.execute(run_log.insert(), [_entry(run_id, export_id, dataset, date, trigger, RUNNING, now_ms)])
        except _UNAVAILABLE:
            return

    def finish(
        self, run_id: str, export_id: str, dataset: str, status: str, now_ms: int, message: str | None = None
    ) -> None:
        where = _one(run_id, export_id, dataset)
        try:
            with self.engine.begin() as conn:
                _close(conn, _CLOSE_ONE, where, status, now_ms, message)
        except _UNAVAILABLE:
            return

    def close_run(self, run_id: str, status: str, now_ms: int, message: str) -> None:
        """End every entry of the run still open: the run itself ended (terminated, or crashed in
        our wiring) while those datasets were in progress or queued."""
        try:
            with self.engine.begin() as conn:
                _close(conn, _CLOSE_STILL_OPEN, {"b_run_id": run_id}, status, now_ms, message)
        except _UNAVAILABLE:
            return

    def settle(
        self,
        run_id: str,
        work: list[tuple[str, str]],
        date: str,
        trigger: str,
        status: str,
        now_ms: int,
        message: str,
    ) -> int:
        """Dagster ended the run (``status``) on its own: close the entries still open, or, when the
        run wrote none (canceled while queued, its worker lost before it began), add one per
        (export, dataset) of ``work``. Returns how many entries changed."""
        try:
            with self.engine.begin() as conn:
                if conn.execute(sa.select(run_log.c.id).where(run_log.c.run_id == run_id).limit(1)).first() is None:
                    if work:
                        rows = [
                            _entry(run_id, e, d, date, trigger, status, now_ms) | {"message": message} for e, d in work
                        ]
                        conn.execute(run_log.insert(), rows)
                    return len(work)
                return _close(conn, _CLOSE_STILL_OPEN, {"b_run_id": run_id}, status, now_ms, message)
        except _UNAVAILABLE:
            return 0

    def entries(self, export_id: str, since_ms: int) -> list[RunLogEntry]:
        query = (
            sa.select(*_ENTRY_COLUMNS)
            .where(run_log.c.export_id == export_id, run_log.c.started_at >= since_ms)
            .order_by(run_log.c.id)
        )
        with self.engine.connect() as conn:
            return [RunLogEntry(*row) for row in conn.execute(query)]


@dataclass(frozen=True, slots=True)
class RunNotes:
    """The run log of one run: what each (export, dataset) was asked by which trigger, and how it ended."""

    log: RunLog
    run_id: str
    trigger: Callable[[str], str]
    clock: Callable[[], int]

    def start(self, export_id: str, dataset: str, day: dt.date) -> None:
        self.log.start(self.run_id, export_id, dataset, day.isoformat(), self.trigger(export_id), self.clock())

    def finish(self, export_id: str, dataset: str, status: str, message: str | None = None) -> None:
        self.log.finish(self.run_id, export_id, dataset, status, self.clock(), message)

    def ended_before(self, export_id: str, dataset: str, day: dt.date, status: str, message: str) -> None:
        """An entry for work the run never began (the export was paused or deleted first)."""
        self.start(export_id, dataset, day)
        self.finish(export_id, dataset, status, message)
