"""Engines for the control plane and the source, with the settings each backend needs."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` (as Heroku, Render, Fly and most PaaS write them) mean
    psycopg2, the driver we install: SQLAlchemy 2 refuses the first spelling on its own."""
    for scheme in ("postgres://", "postgresql://"):
        if url.startswith(scheme):
            return "postgresql+psycopg2://" + url[len(scheme) :]
    return url


def create_engine(url: str, **kwargs: Any) -> sa.Engine:
    """SQLite gets WAL and a busy timeout (the sensor, runs and the CLI share the file);
    PostgreSQL gets pre-ping so a restarted server costs one retry, not a failed run."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True, **kwargs)
