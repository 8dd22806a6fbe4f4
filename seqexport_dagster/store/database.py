"""Engines for the control plane and the source, with the settings each backend needs."""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy import event

from seqexport_dagster.errors import RetryableError

P = ParamSpec("P")
T = TypeVar("T")


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


def secure_sqlite_file(url: sa.URL | str) -> None:
    """Owner-only modes for a control plane kept in a SQLite file: the file 0600, its folder 0700.

    The file holds sealed credentials and customers' bucket names; WAL and shared-memory files are
    created by SQLite with the main file's mode. The folder is created 0700 when missing and
    tightened when it is ours and open to others. Not for PostgreSQL or in-memory databases.
    """
    url = sa.make_url(url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path = Path(url.database).resolve()
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    _owner_only(folder, 0o700)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if file.exists():
            _owner_only(file, 0o600)


def _owner_only(path: Path, mode: int) -> None:
    info = path.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(mode)


def translate_errors(fn: Callable[P, T]) -> Callable[P, T]:
    """The control plane's one error boundary: a database that cannot be reached (or dropped the
    connection) leaves as `RetryableError`, with the driver's first line as the reason."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            first = (str(exc.orig or exc).strip().splitlines() or ["unknown error"])[0]
            raise RetryableError(f"control-plane database unavailable: {first}") from exc

    return wrapper


def make_sqlite_folder(url: str) -> None:
    """A new SQLite control plane's folder (SQLite makes the file, not the folder)."""
    url = normalize_url(url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
