"""Rows and bytes of a test instance's Dagster event log (its SQLite files), and export-windows
committed in the control plane: the figures of issue 23's "per run, not per export-window"."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa


@dataclass(frozen=True)
class EventLogSize:
    rows: int
    bytes: int
    by_type: dict[str, int]


def event_log_size(home: Path) -> EventLogSize:
    rows = size = 0
    by_type: dict[str, int] = {}
    for db in sorted(home.rglob("*.db")):
        with sqlite3.connect(db) as conn:
            try:
                found = conn.execute(
                    "SELECT coalesce(dagster_event_type, 'log'), count(*), coalesce(sum(length(event)), 0)"
                    " FROM event_logs GROUP BY 1"
                ).fetchall()
            except sqlite3.OperationalError:  # not an event log database
                continue
        for kind, count, length in found:
            rows += count
            size += length
            by_type[kind] = by_type.get(kind, 0) + count
    return EventLogSize(rows, size, by_type)


def committed_windows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM windows WHERE status = 'committed'")).scalar_one())
