"""PostgreSQL windows read for Parquet through ``COPY … (FORMAT csv)`` parsed by Arrow (`source/csv_read.py`)
hand over exactly the values the row path reads (psycopg2's tuples), whatever the text holds and
wherever the blocks are cut; a stream given up or failed leaves no COPY behind and is never a short
window; what Arrow's CSV reader refuses continues through ADBC after the last row handed over."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, iso_ms
from seqexport_dagster.demo.generator import insert_rows
from seqexport_dagster.errors import RetryableError
from seqexport_dagster.source import csv_read
from seqexport_dagster_tests.support.world import DAY0, World

pytestmark = pytest.mark.postgres

WINDOW = Window(DAY0, DAY0 + HOUR_MS)
#: Text CSV must carry verbatim: its own quote, separator and line ends, what other tools read as NULL,
#: PostgreSQL's text-format escapes and end marker, spaces, non-ASCII, and the empty string.
HOSTILE_TEXT = [
    '"', '","', '""', 'say "hi"', "a,b", "a\nb", "a\r\nb", "\r", "\n", "NULL", "NA", "\\N", "\\.", "back\\slash",
    "tab\there", " lead and trail ", "é🎉\u2028", "", "x" * 3_000, 'x"\n' * 500,
]  # fmt: skip


def _rows(n: int) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(n):
        at = DAY0 + 1_000 + i * 7
        text = HOSTILE_TEXT[i % len(HOSTILE_TEXT)]
        short = text if len(text) < 64 else "long"  # the wide values go to properties (text, no limit)
        rows.append((
            f"cev_{i:05d}", short or "-", iso_ms(at - 5), iso_ms(at), None if i % 3 == 0 else short,
            "" if i % 5 == 0 else None, None if i % 4 == 1 else json.dumps({"k": text}),
        ))  # fmt: skip
    return rows


def _through_arrow(reader: Any, dataset: str, after: tuple[str, ...] | None = None) -> list[tuple[Any, ...]]:
    batches = list(reader.window_record_batches(dataset, "acme", WINDOW, after=after))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


def _through_rows(reader: Any, dataset: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for batch in reader.window_batches(dataset, "acme", WINDOW) for r in batch]


@pytest.mark.parametrize("block", [csv_read.BLOCK_BYTES, 64, 700])
def test_hostile_text_reads_as_the_row_path_reads_it_wherever_blocks_are_cut(
    pg_world: World, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Blocks of 64 bytes: every row is wider than a block (the buffer grows); 700: cuts fall inside
    quoted values holding newlines, where only the count of quotes tells a row's end."""
    monkeypatch.setattr(csv_read, "BLOCK_BYTES", block)
    monkeypatch.setattr(csv_read, "BATCH_BYTES", 3 * block)
    rows = _rows(400)
    insert_rows(pg_world.source_engine, "custom_events", [("acme", *r) for r in rows])
    reader = pg_world.runner().source
    got = _through_arrow(reader, "custom_events")
    assert got == _through_rows(reader, "custom_events") == rows
    assert _through_arrow(reader, "custom_events", after=(rows[249][3], rows[249][0])) == rows[250:]


def test_integers_and_nulls_read_as_the_row_path_reads_them(pg_world: World) -> None:
    ds = DATASETS["sms_events"]
    rows = []
    for i, segments in enumerate([None, 0, 1, -1, 2**31 - 1, -(2**31), None, 42]):
        row: dict[str, Any] = {f.name: None for f in ds.fields}
        row.update(
            id=f"sms_{i:03d}", event_type="sent", occurred_at=iso_ms(DAY0 + 1 + i), recorded_at=iso_ms(DAY0 + 1 + i)
        )
        row.update(segments=segments, phone="" if i == 2 else "+15550100", reply_text="NULL" if i == 3 else None)
        rows.append(tuple(row[n] for n in ds.field_names))
    insert_rows(pg_world.source_engine, "sms_events", [("acme", *r) for r in rows])
    reader = pg_world.runner().source
    (batch,) = reader.window_record_batches("sms_events", "acme", WINDOW)
    assert batch.schema.field("segments").type == pa.int64()
    assert _through_arrow(reader, "sms_events") == _through_rows(reader, "sms_events") == rows


def test_what_arrow_refuses_continues_through_adbc_after_the_last_row_handed_over(
    pg_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(csv_read, "BLOCK_BYTES", 2_000)
    monkeypatch.setattr(csv_read, "BATCH_BYTES", 2_000)
    rows = _rows(300)
    insert_rows(pg_world.source_engine, "custom_events", [("acme", *r) for r in rows])
    real = csv_read.csv_record_batches
    handed: list[int] = []

    def refused_after_two(engine: sa.Engine, select: str, ds: Any) -> Iterator[Any]:
        for n, batch in enumerate(real(engine, select, ds)):
            if n == 2:
                raise pa.ArrowInvalid("CSV conversion error to int64: out of range")
            handed.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(csv_read, "csv_record_batches", refused_after_two)
    reader = pg_world.runner().source
    assert _through_arrow(reader, "custom_events") == rows, "no row repeated, none skipped"
    assert len(handed) == 2 and 0 < sum(handed) < len(rows)


def _copies(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT g::text%' AND pid <> pg_backend_pid()"
        )
        return int(conn.execute(sa.text(query)).scalar() or 0)


def _wait(condition: Any) -> bool:
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _select(rows: int, *, fail_at: int | None = None) -> str:
    first = "g::text" if fail_at is None else f"CASE WHEN g < {fail_at} THEN g::text ELSE (1 / (g - g))::text END"
    return (
        f"SELECT {first}, repeat('x', 200), '2026-09-30T00:00:00.000Z', '2026-09-30T00:00:00.000Z', NULL, NULL, "
        f"NULL FROM generate_series(1, {rows}) AS g"
    )


def _copy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "seqexport-copy"]


def test_a_stream_given_up_half_way_leaves_no_copy_running_and_the_pool_working(pg_world: World) -> None:
    engine = pg_world.source_engine
    stream = csv_read.csv_record_batches(engine, _select(300_000), DATASETS["custom_events"])
    assert next(stream).num_rows > 0
    stream.close()
    assert _wait(lambda: not _copy_threads()), "the COPY thread ended"
    assert _wait(lambda: _copies(engine) == 0), "no COPY left on the server"
    total = sum(b.num_rows for b in csv_read.csv_record_batches(engine, _select(5_000), DATASETS["custom_events"]))
    assert total == 5_000


def test_a_copy_failing_mid_stream_is_a_retryable_error_never_a_short_window(pg_world: World) -> None:
    engine = pg_world.source_engine
    seen: list[str] = []
    with pytest.raises(RetryableError) as raised:
        for batch in csv_read.csv_record_batches(engine, _select(300_000, fail_at=150_000), DATASETS["custom_events"]):
            seen.extend(batch.column(0).to_pylist())
    assert "division by zero" in str(raised.value)
    assert seen == [str(g) for g in range(1, len(seen) + 1)], "only whole rows, in order, before the error"
    assert len(seen) < 150_000
    assert _wait(lambda: not _copy_threads())
    assert sum(b.num_rows for b in csv_read.csv_record_batches(engine, _select(10), DATASETS["custom_events"])) == 10


def test_an_unreachable_source_is_a_retryable_error_that_never_shows_the_password() -> None:
    engine = sa.create_engine("postgresql+psycopg2://reader:s3cret-pw@127.0.0.1:1/nowhere")
    with pytest.raises(RetryableError) as raised:
        list(csv_read.csv_record_batches(engine, _select(1), DATASETS["custom_events"]))
    assert "source database" in str(raised.value) and "s3cret-pw" not in str(raised.value)


@pytest.mark.parametrize(("column", "kind"), [("segments", "numeric"), ("phone", "uuid USING NULL")])
def test_a_column_whose_type_csv_would_hide_is_read_through_adbc_and_refused_as_the_row_path_refuses_it(
    pg_world: World, monkeypatch: pytest.MonkeyPatch, column: str, kind: str
) -> None:
    """CSV makes every value text: an integral ``numeric`` would pass as an integer and a ``uuid`` as
    text, where the row path gets a ``Decimal`` or a ``UUID`` and refuses it. Such a SELECT is read
    through ADBC (nothing through CSV), and the writer refuses the same row and field either way."""
    from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter
    from seqexport_dagster.errors import UntypeableValue

    with pg_world.source_engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE sms_events ALTER COLUMN {column} TYPE {kind}"))
    ds = DATASETS["sms_events"]
    rows = []
    for i in range(60):
        row: dict[str, Any] = {f.name: None for f in ds.fields}
        row.update(
            id=f"sms_{i:03d}", event_type="sent", occurred_at=iso_ms(DAY0 + 1 + i), recorded_at=iso_ms(DAY0 + 1 + i)
        )
        row.update(segments=i, phone=f"00000000-0000-4000-8000-{i:012d}" if column == "phone" else None)
        rows.append(tuple(row[n] for n in ds.field_names))
    insert_rows(pg_world.source_engine, "sms_events", [("acme", *r) for r in rows])
    reader = pg_world.runner().source
    handed = []
    real = csv_read.csv_record_batches

    def counted(engine: sa.Engine, select: str, dataset: Any) -> Iterator[Any]:
        for batch in real(engine, select, dataset):
            handed.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(csv_read, "csv_record_batches", counted)
    outcomes = []
    for batches in (
        reader.window_record_batches("sms_events", "acme", WINDOW),
        reader.window_batches("sms_events", "acme", WINDOW),
    ):
        try:
            outcomes.append([hashlib.md5(p.body).hexdigest() for p in ParquetPartWriter(ds).parts(batches)])
        except UntypeableValue as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    assert handed == [], "nothing was read through CSV"
    if column != "phone":
        assert "sms_000" in outcomes[0] and column in outcomes[0]
