"""The benchmark's rows: one account's email events over one UTC day, plus a subscriber base.

Generated once with the project's own seeded generator and cached under ``benchmarks/.data/``.
The day holds about ``5 × rows`` events so that windows of 10k, ``rows`` and ``5 × rows`` rows are
all windows ``(DAY0, t]`` of the same account: every measurement reads the same table.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, iso_ms, parse_iso_ms
from seqexport_dagster.demo.generator import email_events, subscribers
from seqexport_dagster.source.tables import create_source_tables

DATA_DIR = Path(__file__).parent / ".data"
#: 2026-09-30T00:00:00Z, the test world's DAY0 and the customer docs' example day.
DAY0 = 20726 * DAY_MS
ACCOUNT = "bench"
SUBSCRIBER_ACCOUNT = "benchsubs"
#: Events per send in the generator's funnel (sent, delivered, 45 % opened, ...), measured.
_EVENTS_PER_SEND = 2.55
_COPIES = 5
_SLICE_MS = 4 * HOUR_MS
_FORMAT = 4  # bump when the layout below changes, so stale caches are rebuilt


@dataclass(frozen=True)
class Source:
    """A generated SQLite source and its windows: size asked for -> (to_ms, exact rows in (DAY0, to_ms])."""

    path: Path
    rows: int
    subscribers: int
    windows: dict[int, tuple[int, int]]

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"


def window_sizes(rows: int) -> list[int]:
    return sorted({min(10_000, rows), rows, _COPIES * rows})


def ensure_source(rows: int, subscriber_count: int, data_dir: Path = DATA_DIR) -> Source:
    """The cached source for ``rows``, generating it if missing or stale."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"source_{rows}_{subscriber_count}.db"
    meta_path = path.with_suffix(".json")
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == _FORMAT:
            windows = {int(k): (v[0], v[1]) for k, v in meta["windows"].items()}
            return Source(path, rows, subscriber_count, windows)
    path.unlink(missing_ok=True)
    started = time.monotonic()
    print(f"  generating {path.name} (cached for later runs) ...", flush=True)
    windows = _generate(path, rows, subscriber_count)
    meta_path.write_text(json.dumps({"format": _FORMAT, "windows": {str(k): list(v) for k, v in windows.items()}}))
    print(f"  generated in {time.monotonic() - started:.0f} s", flush=True)
    return Source(path, rows, subscriber_count, windows)


def _generate(path: Path, rows: int, subscriber_count: int) -> dict[int, tuple[int, int]]:
    """The generator writes one 4-hour slice of ``rows`` events and a fifth of the subscribers (it
    runs at ~25k rows/s in Python); SQLite then replicates them five times, shifted in time and with
    distinct ids, in key order. The rows stay the generator's rows."""
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        create_source_tables(engine)
    finally:
        engine.dispose()
    rng = random.Random(f"bench:{rows}")
    subs = subscribers(rng, SUBSCRIBER_ACCOUNT, max(1, -(-subscriber_count // _COPIES)), DAY0)
    # The events' own subscribers (not inserted: the snapshot benchmark uses the big base).
    event_subs = subscribers(rng, ACCOUNT, 20_000, DAY0)
    sends = int(rows / _EVENTS_PER_SEND * 1.05) + 10
    events = email_events(rng, ACCOUNT, event_subs, DAY0, DAY0 + _SLICE_MS, sends)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-1000000")
        _replicate(conn, "email_events", events, _event_copy, f"recorded_at < '{iso_ms(DAY0 + DAY_MS)}'")
        _replicate(conn, "subscribers", subs, _subscriber_copy, "1")
        conn.execute(
            "DELETE FROM subscribers WHERE account_id = ? AND id NOT IN "
            "(SELECT id FROM subscribers WHERE account_id = ? ORDER BY id LIMIT ?)",
            (SUBSCRIBER_ACCOUNT, SUBSCRIBER_ACCOUNT, subscriber_count),
        )
        conn.commit()
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return _windows(path, rows)


def _event_copy(k: int, column: str) -> str:
    if column in ("occurred_at", "recorded_at"):
        return f"strftime('%Y-%m-%dT%H:%M:%fZ', {column}, '+{4 * k} hours')"
    if column in ("id", "message_id"):
        return f"{column} || '.{k}'"
    return column


def _subscriber_copy(k: int, column: str) -> str:
    # sub_benchsubs_0000042 -> sub_benchsubs_30000042 for copy 3: unique, same shape.
    return f"substr(id, 1, 14) || '{k}' || substr(id, 15)" if column == "id" else column


def _replicate(
    conn: sqlite3.Connection, table: str, rows: Iterable[tuple[Any, ...]], copy: Callable[[int, str], str], where: str
) -> None:
    """Append ``rows`` into a heap, then insert ``_COPIES`` transformed copies in primary-key order
    (random inserts into a multi-GB B-tree would take an order of magnitude longer)."""
    columns = ["account_id", *DATASETS[table].field_names]
    names = ", ".join(columns)
    conn.execute(f"CREATE TEMP TABLE heap ({names})")
    conn.executemany(f"INSERT INTO heap VALUES ({', '.join('?' for _ in columns)})", rows)
    copies = " UNION ALL ".join(
        f"SELECT {', '.join(f'{copy(k, c)} AS {c}' for c in columns)} FROM heap" for k in range(_COPIES)
    )
    order = "account_id, id" if DATASETS[table].is_snapshot else "account_id, recorded_at, id"
    conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM ({copies}) WHERE {where} ORDER BY {order}")
    conn.execute("DROP TABLE heap")
    conn.commit()


def row_midpoint(source: Source, to_ms: int) -> int:
    """The ``recorded_at`` that splits the window ``(DAY0, to_ms]`` into two halves of equal rows."""
    conn = sqlite3.connect(source.path)
    try:
        bounds = (ACCOUNT, iso_ms(DAY0), iso_ms(to_ms))
        (total,) = conn.execute(
            "SELECT count(*) FROM email_events WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ?", bounds
        ).fetchone()
        (stamp,) = conn.execute(
            "SELECT recorded_at FROM email_events WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ? "
            "ORDER BY recorded_at, id LIMIT 1 OFFSET ?",
            (*bounds, max(total // 2 - 1, 0)),
        ).fetchone()
        return parse_iso_ms(stamp)
    finally:
        conn.close()


def _windows(path: Path, rows: int) -> dict[int, tuple[int, int]]:
    """For each window size, the first ``to_ms`` whose window ``(DAY0, to_ms]`` holds that many rows."""
    conn = sqlite3.connect(path)
    try:
        windows = {}
        (total,) = conn.execute("SELECT count(*) FROM email_events WHERE account_id = ?", (ACCOUNT,)).fetchone()
        for size in window_sizes(rows):
            (stamp,) = conn.execute(
                "SELECT recorded_at FROM email_events WHERE account_id = ? ORDER BY recorded_at, id LIMIT 1 OFFSET ?",
                (ACCOUNT, min(size, total) - 1),
            ).fetchone()
            to_ms = parse_iso_ms(stamp)
            (exact,) = conn.execute(
                "SELECT count(*) FROM email_events WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ?",
                (ACCOUNT, iso_ms(DAY0), iso_ms(to_ms)),
            ).fetchone()
            windows[size] = (to_ms, int(exact))
        return windows
    finally:
        conn.close()


PG_ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def ensure_postgres(source: Source, size: int, name: str = "seqexport_bench") -> str:
    """A scratch database holding the same rows as the ``size`` window (kept between runs; reloaded
    when its rows differ). Returns its SQLAlchemy URL."""
    import psycopg2

    url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    to_ms, expected = source.windows[size]
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if not conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    engine = sa.create_engine(url)
    try:
        create_source_tables(engine)
        with engine.connect() as conn:
            have = tuple(conn.execute(sa.text("SELECT count(*), max(recorded_at) FROM email_events")).one())
    finally:
        engine.dispose()
    if have == (expected, iso_ms(to_ms)):
        return url
    print(f"  loading {expected:,} rows into PostgreSQL database {name} ...", flush=True)
    columns = ", ".join(["account_id", *DATASETS["email_events"].field_names])
    lite = sqlite3.connect(source.path)
    pg = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=name)
    try:
        with pg, pg.cursor() as cur:
            cur.execute("TRUNCATE email_events")
            rows = lite.execute(
                f"SELECT {columns} FROM email_events WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ? "
                "ORDER BY recorded_at, id",
                (ACCOUNT, iso_ms(DAY0), iso_ms(to_ms)),
            )
            cur.copy_expert(f"COPY email_events ({columns}) FROM STDIN", _CopyText(rows))
        with pg.cursor() as cur:
            pg.autocommit = True
            cur.execute("VACUUM ANALYZE email_events")
    finally:
        pg.close()
        lite.close()
    return url


def drop_postgres(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


class _CopyText:
    """A file-like object feeding rows to COPY FROM STDIN in PostgreSQL's text format."""

    def __init__(self, rows: Iterable[tuple[Any, ...]]) -> None:
        self.rows = iter(rows)
        self.pending = b""

    @staticmethod
    def _field(value: Any) -> str:
        if value is None:
            return "\\N"
        text = str(value)
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")

    def read(self, size: int = 65536) -> bytes:
        chunks = [self.pending]
        length = len(self.pending)
        while length < size:
            row = next(self.rows, None)
            if row is None:
                break
            line = ("\t".join(self._field(v) for v in row) + "\n").encode()
            chunks.append(line)
            length += len(line)
        data = b"".join(chunks)
        self.pending = data[size:]
        return data[:size]

    readline = read
