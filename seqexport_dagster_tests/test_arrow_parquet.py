"""Parquet parts from Arrow batches (PostgreSQL through ADBC, issue 46) are byte for byte the parts the
row path writes, and refuse every value the row path refuses, with the same named error.

A re-cut must reproduce the same bytes (DESIGN §4): a window first written from Arrow batches may be
re-sent from rows (a part of unknown outcome, `attempt._rows`), and the other way round.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, iso_ms
from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter
from seqexport_dagster.demo.generator import insert_rows
from seqexport_dagster.errors import UntypeableValue
from seqexport_dagster_tests.support.world import DAY0, World

WINDOW = Window(DAY0, DAY0 + HOUR_MS)
#: JSON whose raw text spans lines and carries a complete row (it forged one on bfe50bc), spaces to be
#: compacted, line separators, non-ASCII and an escaped quote.
HOSTILE_JSON = [
    '{"note":\n{"id":"evt_FORGED","name":"forged"}\n}',
    '{ "a" : [1, 2.5, null, true],  "b": "x\u2028y\u0085z" }',
    '{"émoji":"🎉","q":"say \\"hi\\""}',
    "{}",
    None,
]


def custom_rows(n: int) -> list[tuple[Any, ...]]:
    rng = random.Random(46)
    rows = []
    for i in range(n):
        at = DAY0 + 1_000 + i * 7
        rows.append((
            f"cev_{i:05d}", rng.choice(["signup", "it's", "$q$", "a\nb"]), iso_ms(at - rng.randrange(10**9)), iso_ms(at),
            rng.choice([None, "sub_1"]), rng.choice([None, "a@example.com"]), rng.choice(HOSTILE_JSON),
        ))  # fmt: skip
    rows[0] = (*rows[0][:2], "0001-01-01T00:00:00.000Z", *rows[0][3:])
    rows[1] = (*rows[1][:2], "9999-12-31T23:59:59.999Z", *rows[1][3:])
    return rows


def as_arrow(rows: list[tuple[Any, ...]], dataset: str, sizes: list[int]) -> list[pa.RecordBatch]:
    """Rows as the ADBC driver hands them over: text columns (integers as int32), in batches of ``sizes``."""
    ds = DATASETS[dataset]
    kinds = [pa.int32() if f.type == "integer" else pa.string() for f in ds.fields]
    out, start = [], 0
    for size in sizes:
        chunk = rows[start : start + size]
        columns = list(zip(*chunk, strict=True)) if chunk else [()] * len(kinds)
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.array(list(c), type=k) for c, k in zip(columns, kinds, strict=True)], names=ds.field_names
            )
        )
        start += size
    return out


def cut(batches: Any, dataset: str, part_limit: int) -> list[tuple[int, str, int, tuple[str, ...], Any]]:
    writer = ParquetPartWriter(DATASETS[dataset], part_limit)
    return [(p.number, hashlib.md5(p.body).hexdigest(), p.rows, p.ids, p.last) for p in writer.parts(batches)]


def random_sizes(rng: random.Random, total: int) -> list[int]:
    sizes = []
    while total > 0:
        sizes.append(min(total, rng.choice([1, 7, 500, 4_096, 6_000])))
        total -= sizes[-1]
    return sizes


#: The first part of `custom_rows(12_000)` cut at 10,000 rows, as the row path wrote it on the day the
#: Arrow path came (pyarrow 26.0.1, zstd 3): any change to these bytes is a change to the contract's
#: re-cut rule, and must be deliberate.
GOLDEN_MD5 = "6e3b6fec3e4513deafc664e32e62f29c"


def test_arrow_batches_give_the_row_paths_bytes_whatever_their_sizes() -> None:
    rows = custom_rows(12_000)
    by_rows = cut([rows[i : i + 500] for i in range(0, len(rows), 500)], "custom_events", 10_000)
    assert by_rows[0][1] == GOLDEN_MD5, by_rows[0][1]
    rng = random.Random(7)
    for _ in range(3):
        by_arrow = cut(as_arrow(rows, "custom_events", random_sizes(rng, len(rows))), "custom_events", 10_000)
        assert by_arrow == by_rows
    assert by_rows[0][4] == (rows[9_999][3], rows[9_999][0]), "the boundary is the source's text"


def test_integers_and_empty_windows_match_too() -> None:
    ds = DATASETS["sms_events"]
    rows = []
    for i in range(50):
        row: dict[str, Any] = {f.name: None for f in ds.fields}
        row.update(id=f"sms_{i:03d}", event_type="sent", occurred_at=iso_ms(DAY0 + i), recorded_at=iso_ms(DAY0 + i))
        row.update(segments=None if i % 3 else i * 1_000_003, phone="+15550100")
        rows.append(tuple(row[n] for n in ds.field_names))
    assert cut(as_arrow(rows, "sms_events", [20, 0, 30]), "sms_events", 40) == cut([rows], "sms_events", 40)
    assert cut(as_arrow([], "sms_events", [0]), "sms_events", 40) == cut([], "sms_events", 40)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("occurred_at", "2026-09-30 12:34:56.789Z"),
        ("occurred_at", "2026-09-30T12:34:56.789+00:00"[:24]),
        ("occurred_at", "0000-01-01T00:00:00.000Z"),
        ("occurred_at", "2026-02-30T00:00:00.000Z"),
        ("occurred_at", "12abc"),
        ("properties", '{},"id":"evt_FORGED3"'),
        ("properties", '["not", "an", "object"]'),
        ("properties", "{broken"),
        ("id", None),
    ],
)
def test_a_value_the_row_path_refuses_is_refused_from_arrow_with_the_same_error(field: str, value: Any) -> None:
    rows = custom_rows(30)
    ds = DATASETS["custom_events"]
    at = ds.field_names.index(field)
    rows[17] = (*rows[17][:at], value, *rows[17][at + 1 :])
    errors = []
    for batches in ([rows], as_arrow(rows, "custom_events", [10, 20])):
        with pytest.raises(UntypeableValue) as raised:
            cut(batches, "custom_events", 50_000)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    assert f"field {field}" in errors[1]


@pytest.mark.postgres
def test_a_postgresql_parquet_window_is_read_as_arrow_and_re_cut_from_rows_to_the_same_bytes(pg_world: World) -> None:
    with pg_world.source_engine.begin() as conn:  # docs/operators.md allows a json column for properties
        conn.execute(sa.text("ALTER TABLE custom_events ALTER COLUMN properties TYPE json USING properties::json"))
    rows = custom_rows(300)
    insert_rows(pg_world.source_engine, "custom_events", [("acme", *r) for r in rows])
    export = pg_world.local_export(datasets=("custom_events",), frequency="1h", file_format="parquet")
    pg_world.clock.now_ms = DAY0 + 2 * HOUR_MS
    pg_world.runner().run_day(export.id, "custom_events", dt.date(2026, 9, 30))
    written = sorted((pg_world.root / "bucket" / "custom_events").rglob("*.parquet"))
    reader = pg_world.runner().source
    batches = list(reader.window_record_batches("custom_events", "acme", WINDOW))
    assert batches and all(isinstance(b, pa.RecordBatch) for b in batches), "PostgreSQL reads Arrow natively"
    from_rows = ParquetPartWriter(DATASETS["custom_events"]).parts(
        reader.window_batches("custom_events", "acme", WINDOW)
    )
    assert [p.body for p in from_rows] == [written[0].read_bytes()]
    boundary = (rows[99][3], rows[99][0])  # after a part boundary: the literal SQL quotes it
    rest = [
        r
        for b in reader.window_record_batches("custom_events", "acme", WINDOW, after=boundary)
        for r in b.column(0).to_pylist()
    ]
    assert rest == [r[0] for r in rows[100:]]
    assert reader.window_record_batches("custom_events", "acme", WINDOW, after=("9999", "x$q$'")) is not None
    assert not [
        b for b in reader.window_record_batches("custom_events", "acme", WINDOW, after=("9999", "x$q$'")) if b.num_rows
    ]


def _arrow_checker(dataset: str) -> Any:
    from seqexport_dagster.delivery.arrow_check import ArrowChecker

    writer = ParquetPartWriter(DATASETS[dataset])
    return ArrowChecker(writer.dataset, writer.schema, writer._columns, writer._batch)


@pytest.mark.parametrize(
    "stamp",
    [
        "0001-01-01T00:00:00.000Z",
        "9999-12-31T23:59:59.999Z",
        "2024-02-29T12:00:00.000Z",  # a leap day
        "2000-02-29T00:00:00.000Z",  # divisible by 400: leap
        "1969-12-31T23:59:59.999Z",
    ],
)
def test_valid_timestamps_pass_the_column_check_itself_with_the_row_paths_values(stamp: str | None) -> None:
    """The column check (NumPy over the Arrow buffers) takes valid batches itself, nulls included, and
    gives the row path's values: a check that fell back to rows for everything would give the same
    bytes too, at the row path's cost."""
    rows = custom_rows(40)
    at = DATASETS["custom_events"].field_names.index("occurred_at")
    rows[5] = (*rows[5][:at], stamp, *rows[5][at + 1 :])
    (batch,) = as_arrow(rows, "custom_events", [40])
    checked = _arrow_checker("custom_events")._columns(batch)
    assert checked is not None, "checked by column, not handed to RowChecker"
    from seqexport_dagster.delivery import parquet_writer as pw

    assert checked[at].equals(pw._timestamps([r[at] for r in rows]))
    assert checked[at][5].as_py() == pa.scalar(stamp).cast(pw.TIMESTAMP).as_py()


def test_a_nullable_timestamp_column_with_nulls_passes_the_column_check_with_its_nulls() -> None:
    from seqexport_dagster.delivery import parquet_writer as pw
    from seqexport_dagster.demo.generator import subscribers

    rows = [row[1:] for row in subscribers(random.Random(5), "acme", 60, DAY0)]
    at = DATASETS["subscribers"].field_names.index("unsubscribed_at")
    rows = [(*r[:at], iso_ms(DAY0 + i) if i % 3 == 0 else None, *r[at + 1 :]) for i, r in enumerate(rows)]
    (batch,) = as_arrow(rows, "subscribers", [len(rows)])
    checked = _arrow_checker("subscribers")._columns(batch)
    assert checked is not None and checked[at].null_count == 40
    assert checked[at].equals(pw._timestamps([r[at] for r in rows]))


@pytest.mark.parametrize(
    "stamp",
    [
        "0000-01-01T00:00:00.000Z",
        "2026-02-29T00:00:00.000Z",
        "2100-02-29T00:00:00.000Z",  # divisible by 100, not by 400: no leap day
        "2026-04-31T00:00:00.000Z",
        "2026-13-01T00:00:00.000Z",
        "2026-00-01T00:00:00.000Z",
        "2026-09-00T00:00:00.000Z",
        "2026-09-30T24:00:00.000Z",
        "2026-09-30T12:60:00.000Z",
        "2026-09-30T12:34:60.000Z",
        "2026-09-30T12:34:56.789+",
        "2026-09-30 12:34:56.789Z",
        "2026-09-30T12:34:5a.789Z",
        "2026-09-30T12:34:56.789Z ",
        "２026-09-30T12:34:56.789Z",
    ],
)
def test_a_timestamp_out_of_form_or_calendar_is_left_to_the_row_checker(stamp: str) -> None:
    rows = custom_rows(40)
    at = DATASETS["custom_events"].field_names.index("occurred_at")
    rows[5] = (*rows[5][:at], stamp, *rows[5][at + 1 :])
    (batch,) = as_arrow(rows, "custom_events", [40])
    assert _arrow_checker("custom_events")._columns(batch) is None


def test_integers_of_any_signed_width_are_widened_and_unsigned_ones_left_to_the_row_checker() -> None:
    ds = DATASETS["sms_events"]
    at = ds.field_names.index("segments")
    row: dict[str, Any] = {f.name: None for f in ds.fields}
    row.update(id="sms_1", event_type="sent", occurred_at=iso_ms(DAY0), recorded_at=iso_ms(DAY0), phone="+1555")
    base = [tuple(row[n] for n in ds.field_names)] * 3
    (batch,) = as_arrow(base, "sms_events", [3])
    for kind, values in ((pa.int8(), [1, None, -3]), (pa.int16(), [300, None, -3]), (pa.int32(), [70_000, 2, None])):
        typed = batch.set_column(at, "segments", pa.array(values, kind))
        checked = _arrow_checker("sms_events")._columns(typed)
        assert checked is not None and checked[at].type == pa.int64() and checked[at].to_pylist() == values
    unsigned = batch.set_column(at, "segments", pa.array([1, 2, 3], pa.uint32()))
    assert _arrow_checker("sms_events")._columns(unsigned) is None


def test_an_unreachable_source_is_a_retryable_error_that_never_shows_the_password() -> None:
    from seqexport_dagster.errors import RetryableError
    from seqexport_dagster.source.arrow_read import record_batches

    engine = sa.create_engine("postgresql+psycopg2://reader:s3cret-pw@127.0.0.1:1/nowhere")
    with pytest.raises(RetryableError) as raised:
        list(record_batches(engine, "SELECT 1"))
    assert "source database error" in str(raised.value) and "s3cret-pw" not in str(raised.value)


@pytest.mark.parametrize("value", ["plain", "it's", "x$q", "$q$", "a$", "$", "", "$q0$$q$", "back\\slash"])
def test_a_literal_is_read_back_verbatim(value: str) -> None:
    from seqexport_dagster.source.arrow_read import literal

    tag = literal(value).split("$")[1]
    assert literal(value) == f"${tag}${value}${tag}$"
    assert (value + f"${tag}$").find(f"${tag}$") == len(value), "the closing tag is the first one"


def _backend(engine: sa.Engine) -> int:
    """The server process id of the ADBC connection a window read gets (one read, to its end)."""
    from seqexport_dagster.source.arrow_read import record_batches

    (batch,) = list(record_batches(engine, "SELECT pg_backend_pid() AS pid"))
    return int(batch.column(0)[0].as_py())


def _gone(engine: sa.Engine, pid: int) -> bool:
    """Whether the server process ``pid`` has ended, waiting up to 10 s (a backend exits just after
    its client closes)."""
    import time

    deadline = time.monotonic() + 10
    while True:
        with engine.connect() as conn:
            query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p")
            if not conn.execute(query, {"p": pid}).scalar():
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.postgres
def test_window_reads_share_a_connection_and_never_one_left_mid_stream_or_closed(pg_world: World) -> None:
    """Opening ADBC's database reads PostgreSQL's type catalog (45-70 ms of CPU a window): reads of one
    process reuse it and an idle connection (`arrow_read._Connections`). A stream given up half-way
    (a failed PUT) may still be inside its COPY: its connection is closed, never reused. One the
    server ended while idle is replaced on the next read, without an error. Disposing the engine
    (a resource's teardown) closes what is idle, and never fails for a read still under way."""
    from seqexport_dagster.source.arrow_read import record_batches

    engine = pg_world.source_engine
    first = _backend(engine)
    assert _backend(engine) == first, "the second read reused the first one's connection"
    stream = record_batches(engine, "SELECT g, repeat('x', 200) FROM generate_series(1, 300000) AS g")
    assert next(stream).num_rows > 0
    stream.close()  # given up half-way
    assert _gone(engine, first), "the half-read connection was closed, not returned"
    after = _backend(engine)
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": after})
    assert _gone(engine, after)
    replaced = _backend(engine)  # no RetryableError: the dead idle connection is replaced
    assert replaced != after
    engine.dispose()
    assert _gone(engine, replaced), "the engine's disposal closed the idle connection"
    # Disposed while a read is under way (another thread's window): the read ends normally, and its
    # connection is closed with it instead of being kept (ADBC refuses to close a database that
    # still has a connection: the disposal must not raise).
    reading = record_batches(engine, "SELECT g FROM generate_series(1, 300000) AS g")
    first_batch = next(reading)
    engine.dispose()
    assert first_batch.num_rows + sum(b.num_rows for b in reading) == 300_000
    assert _backend(engine) != replaced, "a new database and connection after the disposal"


@pytest.mark.postgres
def test_a_parquet_worker_on_postgresql_loads_neither_compute_nor_pandas(tmp_path: Any) -> None:
    """The Arrow read path's own imports stay off a worker: ``pyarrow.compute`` (+8 MB resident: the
    column checks run over the buffers in NumPy), pandas and ``pyarrow.dataset`` (ADBC's DB-API
    module), ``pyarrow.parquet`` with its filesystems, and ADBC's driver, which the CSV read replaced.
    Real parts, written in a process of its own."""
    import subprocess
    import sys

    from seqexport_dagster.store.crypto import SecretBox, new_key_spec
    from seqexport_dagster_tests.support.processes import ROOT, run_in_group
    from seqexport_dagster_tests.support.world import Clock, postgres_database

    key_spec = new_key_spec("t1")
    with postgres_database() as control, postgres_database() as source:
        world = World(tmp_path, control, source, Clock(DAY0), box=SecretBox.parse(key_spec))
        try:
            insert_rows(world.source_engine, "custom_events", [("acme", *r) for r in custom_rows(300)])
            export = world.local_export(datasets=("email_events", "custom_events"), file_format="parquet")
        finally:
            world.dispose()
        listing = tmp_path / "modules.txt"
        command = [
            sys.executable, "-m", "seqexport_dagster_tests.support.worker_imports", str(listing),
            control, source, key_spec, export.id, str(DAY0 + 2 * HOUR_MS + 120_000), "custom_events",
        ]  # fmt: skip
        done = run_in_group(command, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
                            stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) == 300
    modules = set(listing.read_text().split())
    arrow_path = {"seqexport_dagster.source.csv_read", "pyarrow._csv", "seqexport_dagster.delivery.arrow_check"}
    assert arrow_path <= modules, "the Arrow path ran"
    # ADBC is only the fallback for what Arrow's CSV reader refuses (`reader._postgres_record_batches`).
    never = (
        "pyarrow.compute",
        "pandas",
        "pyarrow.dataset",
        "pyarrow.parquet",
        "pyarrow.fs",
        "dagster",
        "adbc_driver_postgresql",
    )
    assert sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in never)) == []
