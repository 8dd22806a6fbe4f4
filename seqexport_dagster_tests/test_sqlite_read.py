"""Parquet windows from SQLite read into Arrow by `source.sqlite_read` (the C module `_sqlite_columns`,
issue 46): the same bytes as the row path whatever the values and batch sizes, the same error for
every value the row path refuses, one SQLite per process (it sees this process's locks), and a read
given up or finished leaves no lock behind.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, iso_ms
from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter
from seqexport_dagster.demo.generator import insert_rows
from seqexport_dagster.errors import RetryableError, UntypeableValue
from seqexport_dagster.source import sqlite_read
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store.database import create_engine
from seqexport_dagster_tests.support.world import DAY0, World

WINDOW = Window(DAY0, DAY0 + HOUR_MS)
#: Text the C reader copies as bytes: NUL, astral and combining characters, a lone-looking escape, an
#: empty string (not NULL), JSON spanning lines, long text (past a batch's byte budget when it is small).
TEXTS = ["", "a\x00b", "🎉 \U0010fffd e\u0301", "\\u0000", "x" * 3_000, "line\nbreak\r\n", 'it\'s "q"', "ümlaut"]
PROPERTIES = ['{"a":[1,2.5,null,true]}', '{"note":\n{"id":"evt_FORGED"}\n}', '{"é":"🎉"}', "{}", None]


def sms_rows(n: int) -> list[tuple[Any, ...]]:
    """SMS events (text and integer fields) with hostile text and integers at the int64 edges."""
    ds = DATASETS["sms_events"]
    rows = []
    for i in range(n):
        at = DAY0 + 1_000 + i * 11
        values: dict[str, Any] = {f.name: None for f in ds.fields}
        values.update(
            id=f"sms_{i:05d}",
            event_type="sent",
            occurred_at=iso_ms(at - 5),
            recorded_at=iso_ms(at),
            segments=[None, 0, 1, -(2**63), 2**63 - 1, 7][i % 6],
            reply_text=TEXTS[i % len(TEXTS)] if i % 3 else None,
            phone="+14155550123",
        )
        rows.append(tuple(values[f.name] for f in ds.fields))
    return rows


def custom_rows(n: int) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(n):
        at = DAY0 + 1_000 + i * 7
        rows.append((
            f"cev_{i:05d}", TEXTS[i % len(TEXTS)] or "named", iso_ms(at - 9), iso_ms(at),
            None if i % 4 else "sub_1", TEXTS[(i + 3) % len(TEXTS)], PROPERTIES[i % len(PROPERTIES)],
        ))  # fmt: skip
    return rows


def cut(batches: Any, dataset: str, part_limit: int) -> list[tuple[int, str, int, tuple[str, ...], Any]]:
    writer = ParquetPartWriter(DATASETS[dataset], part_limit)
    return [(p.number, hashlib.md5(p.body).hexdigest(), p.rows, p.ids, p.last) for p in writer.parts(batches)]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 7 rows or 2 kB of text: many batch ends, inside row groups and parts."""
    monkeypatch.setattr(sqlite_read, "MAX_ROWS", 7)
    monkeypatch.setattr(sqlite_read, "MAX_BYTES", 2_048)


def test_the_c_reader_is_built_and_bound_to_the_processes_sqlite(world: World) -> None:
    # Not optional here: the suite runs where `pip install -e .` can compile (a machine without a C
    # compiler installs without it and reads rows; test_unusable_sources_read_rows_with_the_same_bytes).
    assert sqlite_read.usable(world.source_engine)


@pytest.mark.parametrize(("dataset", "make"), [("sms_events", sms_rows), ("custom_events", custom_rows)])
@pytest.mark.parametrize("part_limit", [50_000, 9])
def test_arrow_batches_from_sqlite_give_the_row_paths_bytes(
    world: World, small_batches: None, dataset: str, make: Any, part_limit: int
) -> None:
    rows = make(120)
    insert_rows(world.source_engine, dataset, [("acme", *r) for r in rows])
    insert_rows(world.source_engine, dataset, [("other", *r) for r in rows[:5]])  # another account's rows
    reader = world.source
    batches = list(reader.window_record_batches(dataset, "acme", WINDOW))
    assert len(batches) > 10 and all(isinstance(b, pa.RecordBatch) for b in batches)
    assert sum(b.num_rows for b in batches) == 120
    assert [v for b in batches for v in b.column("id").to_pylist()] == [r[0] for r in rows]
    from_rows = cut(reader.window_batches(dataset, "acme", WINDOW), dataset, part_limit)
    assert cut(iter(batches), dataset, part_limit) == from_rows
    assert len(from_rows) == (1 if part_limit > 120 else 14)
    # After a part boundary, as a retry continues: exactly the rows after it.
    boundary = (rows[49][3], rows[49][0])
    after = reader.window_record_batches(dataset, "acme", WINDOW, after=boundary)
    assert [v for b in after for v in b.column("id").to_pylist()] == [r[0] for r in rows[50:]]


def test_a_stream_that_goes_on_as_rows_after_arrow_batches_gives_the_same_bytes(
    world: World, small_batches: None
) -> None:
    rows = custom_rows(60)
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in rows])
    arrow = list(world.source.window_record_batches("custom_events", "acme", WINDOW))
    row_batches = list(world.source.window_batches("custom_events", "acme", WINDOW))
    flat = [r for b in row_batches for r in b]
    head = arrow[: len(arrow) // 2]
    k = sum(b.num_rows for b in head)
    mixed: list[Any] = [*head, flat[k : k + 11], flat[k + 11 :]]
    assert 0 < k < 49
    for limit in (50_000, 13):
        assert cut(iter(mixed), "custom_events", limit) == cut(iter(row_batches), "custom_events", limit)


def _untyped_table(engine: sa.Engine, dataset: str) -> None:
    """The dataset as a table without declared types (no affinity: any value is stored as given), as
    an operator's own table or view may be."""
    columns = ", ".join(["account_id", *DATASETS[dataset].field_names])
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {dataset}"))
        conn.execute(sa.text(f"CREATE TABLE {dataset} ({columns})"))


HOSTILE = [
    ("name", "1.5", "a REAL in a text field"),
    ("email", "x'00ff'", "a BLOB in a text field"),
    ("email", "7", "an INTEGER in a text field"),
    ("properties", "CAST(x'7b7dff' AS TEXT)", "text that is not UTF-8"),
    ("email", "CAST(x'eda080' AS TEXT)", "a surrogate in UTF-8"),
    ("email", "CAST(x'c0af' AS TEXT)", "an overlong form"),
    ("email", "CAST(x'f4908080' AS TEXT)", "past U+10FFFF"),
    ("email", "CAST(x'e282' AS TEXT)", "a cut sequence"),
]


@pytest.mark.parametrize(("field", "sql_value", "what"), HOSTILE, ids=[h[2] for h in HOSTILE])
def test_a_value_the_c_reader_does_not_take_ends_as_the_row_path_does(
    world: World, small_batches: None, field: str, sql_value: str, what: str
) -> None:
    _untyped_table(world.source_engine, "custom_events")
    rows = custom_rows(40)
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in rows])
    with world.source_engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE custom_events SET {field} = {sql_value} WHERE id = 'cev_00023'"))
    outcomes = []
    for batches in (
        world.source.window_batches("custom_events", "acme", WINDOW),
        world.source.window_record_batches("custom_events", "acme", WINDOW),
    ):
        with pytest.raises(UntypeableValue) as raised:
            cut(batches, "custom_events", 50_000)
        outcomes.append(str(raised.value))
    assert outcomes[0] == outcomes[1]
    assert "cev_00023" in outcomes[1] and f"field {field}" in outcomes[1]
    # Never the value: the `sqlite3` module's own decode error quotes it ("with text '...'").
    assert "with text" not in outcomes[1] and "\ufffd" not in outcomes[1] and "{}" not in outcomes[1]


def test_an_integer_field_holding_text_or_a_real_is_refused_as_on_the_row_path(world: World) -> None:
    _untyped_table(world.source_engine, "sms_events")
    rows = sms_rows(20)
    insert_rows(world.source_engine, "sms_events", [("acme", *r) for r in rows])
    for value in ("'7'", "2.5", "x'01'"):
        with world.source_engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE sms_events SET segments = {value} WHERE id = 'sms_00011'"))
        errors = []
        for batches in (
            world.source.window_batches("sms_events", "acme", WINDOW),
            world.source.window_record_batches("sms_events", "acme", WINDOW),
        ):
            with pytest.raises(UntypeableValue) as raised:
                cut(batches, "sms_events", 50_000)
            errors.append(str(raised.value))
        assert errors[0] == errors[1] and "sms_00011" in errors[1] and "field segments" in errors[1]


def _rollback_journal(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")


def test_the_reader_sees_this_processes_write_lock(world: World) -> None:
    """One SQLite per process: a second copy of the library would not see a lock this process holds
    (POSIX locks do not conflict within a process) and would read under a writer's exclusive lock."""
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in custom_rows(10)])
    world.source_engine.dispose()
    path = Path(world.source_engine.url.database or "")
    _rollback_journal(path)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("DELETE FROM custom_events")
        sql = "SELECT id FROM custom_events WHERE account_id = ?"
        ds = DATASETS["custom_events"]
        with pytest.raises(RetryableError, match="database is locked"):
            list(sqlite_read.record_batches(world.source_engine, sql, ("acme",), _one_field(ds), timeout_ms=50))
        writer.execute("COMMIT")
        got = list(sqlite_read.record_batches(world.source_engine, sql, ("acme",), _one_field(ds), timeout_ms=50))
        assert sum(b.num_rows for b in got) == 0
    finally:
        writer.close()


def _one_field(ds: Any) -> Any:
    """A dataset of one text field, ``id``, for a statement selecting only it."""
    from dataclasses import replace

    return replace(ds, fields=tuple(f for f in ds.fields if f.name == "id"))


def test_a_read_given_up_or_finished_holds_no_lock(world: World, small_batches: None) -> None:
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in custom_rows(50)])
    world.source_engine.dispose()
    path = Path(world.source_engine.url.database or "")
    _rollback_journal(path)
    engine = create_engine(f"sqlite:///{path}")
    reader = SourceReader(engine)
    try:
        stream: Iterator[Any] = iter(reader.window_record_batches("custom_events", "acme", WINDOW))
        assert next(stream).num_rows
        stream.close()  # given up mid-window (a failed upload, a cancelled run)
        assert sum(b.num_rows for b in reader.window_record_batches("custom_events", "acme", WINDOW)) == 50
        with sqlite3.connect(path, timeout=0) as writer:  # no shared lock left: the write gets in at once
            writer.execute("DELETE FROM custom_events WHERE id = 'cev_00001'")
    finally:
        engine.dispose()


def test_windows_read_in_threads_at_once_are_each_whole(world: World, small_batches: None) -> None:
    rows = custom_rows(300)
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in rows])
    expected = cut(world.source.window_batches("custom_events", "acme", WINDOW), "custom_events", 50_000)
    start = threading.Barrier(4)

    def one(_: int) -> Any:
        start.wait()
        return cut(world.source.window_record_batches("custom_events", "acme", WINDOW), "custom_events", 50_000)

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(4))) == [expected] * 4


def test_unusable_sources_read_rows_with_the_same_bytes(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in custom_rows(30)])
    for url in ("sqlite://", "sqlite:///:memory:", f"{world.source_engine.url}?timeout=5", "sqlite:///file:x?uri=true"):
        assert sqlite_read.database_path(sa.create_engine(url)) is None, url
    native = cut(world.source.window_record_batches("custom_events", "acme", WINDOW), "custom_events", 50_000)
    monkeypatch.setattr(sqlite_read, "_module", sqlite_read._UNAVAILABLE)  # built without a C compiler
    assert not sqlite_read.usable(world.source_engine)
    batches = list(world.source.window_record_batches("custom_events", "acme", WINDOW))
    assert batches and all(isinstance(b, list) for b in batches)
    assert cut(iter(batches), "custom_events", 50_000) == native


def test_a_missing_database_is_a_retryable_error_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with pytest.raises(RetryableError, match="source database error: unable to open database file"):
        list(sqlite_read.record_batches(engine, "SELECT 1", (), _one_field(DATASETS["custom_events"])))
    assert not path.exists()


def test_a_sqlite_parquet_window_runs_through_the_runner_and_duckdb_reads_it(world: World) -> None:
    rows = custom_rows(500)
    insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in rows])
    export = world.local_export(datasets=("custom_events",), frequency="1h", file_format="parquet")
    world.clock.now_ms = DAY0 + 2 * HOUR_MS
    world.runner().run_day(export.id, "custom_events", dt.date(2026, 9, 30))
    written = sorted((world.root / "bucket" / "custom_events").rglob("*.parquet"))
    from_rows = ParquetPartWriter(DATASETS["custom_events"]).parts(
        world.source.window_batches("custom_events", "acme", WINDOW)
    )
    assert [p.body for p in from_rows] == [written[0].read_bytes()]
    with duckdb.connect() as con:
        got = con.execute(
            f"SELECT id, name, email FROM read_parquet('{written[0]}') ORDER BY recorded_at, id"
        ).fetchall()
    assert got == [(r[0], r[1], r[5]) for r in rows]
