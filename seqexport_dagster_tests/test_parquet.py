"""Parquet (issue 27): typed from the contract, the same names, limits and write-once rules as JSONL.

Pure tests check the writer (schema, values and types round trip, byte-identical parts whatever the
batching, the part limit); end-to-end tests export real days through the runner into a local folder and
into moto buckets (plain and create-only, under faults), read every file back with pyarrow and DuckDB
(the docs' statement), and check that a format change never splits a window.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from seqexport_dagster.contract import warehouse, warehouse_parquet
from seqexport_dagster.contract.keys import parse_key
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, parse_iso_ms
from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter, arrow_schema, empty_parquet
from seqexport_dagster.delivery.writer import PartWriter
from seqexport_dagster.demo.generator import Scale, email_events, generate_account, insert_rows, subscribers
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.verify import LocalBucket, verify_bucket
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.cli_harness import run_fixture  # noqa: F401 - the `run` fixture
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.faults.scene import s3_export, s3_runner
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.layout import check_layout
from seqexport_dagster_tests.support.parts import part_rows
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
LAG = 120_000
SMALL = Scale(subscribers=80, email_sends_per_hour=30, sms_sends_per_hour=8, custom_per_hour=15)
ARROW_OF = {
    "string": pa.string(),
    "timestamp": pa.timestamp("ms", tz="UTC"),
    "integer": pa.int64(),
    "object": pa.string(),
    "array": pa.list_(pa.string()),
}


def generated(dataset: str, n_sends: int = 40, seed: int = 3) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    subs = subscribers(rng, "acme", 30, DAY0)
    if dataset == "subscribers":
        return [row[1:] for row in subs]
    if dataset == "email_events":
        return [row[1:] for row in email_events(rng, "acme", subs, DAY0, DAY0 + HOUR_MS, n_sends)]
    rows = []
    for i in range(n_sends):
        at = f"2026-09-30T{i // 60000 % 24:02d}:{i // 1000 % 60:02d}:00.{i % 1000:03d}Z"
        if dataset == "sms_events":
            rows.append(
                (f"sev_{i:04d}", "sent", at, at, "sub_1", "+14155550123", None, None, "m", i % 3, None, None, None)
            )
        else:
            rows.append((f"cev_{i:04d}", "order", at, at, "sub_1", None, json.dumps({"n": i, "city": "Zürich"})))
    return rows


def test_the_parquet_schema_is_the_contract() -> None:
    for ds in DATASETS.values():
        schema = arrow_schema(ds)
        assert schema.names == list(ds.field_names)
        assert [f.type for f in schema] == [ARROW_OF[f.type] for f in ds.fields]
        assert [f.nullable for f in schema] == [f.nullable for f in ds.fields]


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_values_and_types_round_trip(dataset: str) -> None:
    ds = DATASETS[dataset]
    rows = generated(dataset)
    assert rows
    (part,) = ParquetPartWriter(ds).parts([rows])
    table = pq.read_table(io.BytesIO(part.body))
    assert table.schema.equals(arrow_schema(ds), check_metadata=False)
    assert part.rows == table.num_rows == len(rows)
    assert part.ids == tuple(r[0] for r in rows)
    for f, column in zip(ds.fields, table.columns, strict=True):
        expected = [r[ds.field_names.index(f.name)] for r in rows]
        if f.type == "timestamp":
            got: list[Any] = column.cast(pa.int64()).to_pylist()
            expected = [None if v is None else parse_iso_ms(v) for v in expected]
        elif f.type == "array":
            got = column.to_pylist()
            expected = [None if v is None else json.loads(v) for v in expected]
        elif f.type == "object":  # the same JSON value, re-encoded compactly on one line (values.py)
            texts = column.to_pylist()
            assert all(t is None or ("\n" not in t and ": " not in t) for t in texts), f.name
            got = [None if t is None else json.loads(t) for t in texts]
            expected = [None if v is None else json.loads(v) for v in expected]
        else:
            got = column.to_pylist()
        assert got == expected, f.name


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 90), limit=st.integers(1, 30), sizes=st.lists(st.integers(1, 40), max_size=8))
def test_parts_split_like_jsonl_and_their_bytes_do_not_depend_on_batching(
    total: int, limit: int, sizes: list[int]
) -> None:
    ds = DATASETS["custom_events"]
    rows = generated("custom_events", n_sends=total)
    batches, start = [], 0
    for size in sizes:
        batches.append(rows[start : start + size])
        start += size
    batches.append(rows[start:])
    batches = [b for b in batches if b]
    parquet = list(ParquetPartWriter(ds, limit).parts(batches))
    whole = list(ParquetPartWriter(ds, limit).parts([rows]))
    jsonl = list(PartWriter(ds, limit).parts([rows]))
    assert [p.body for p in parquet] == [p.body for p in whole], "re-cut parts must be byte-identical"
    assert [(p.number, p.rows, p.ids, p.last) for p in parquet] == [(p.number, p.rows, p.ids, p.last) for p in jsonl]
    assert all(pq.read_metadata(io.BytesIO(p.body)).num_rows == p.rows <= limit for p in parquet)


def test_an_empty_window_is_a_valid_empty_file_and_the_limit_is_the_contract() -> None:
    ds = DATASETS["email_events"]
    (part,) = ParquetPartWriter(ds).parts([])
    assert part.rows == 0 and part.body == empty_parquet(ds)
    table = pq.read_table(io.BytesIO(part.body))
    assert table.num_rows == 0 and table.schema.names == list(ds.field_names)
    assert list(ParquetPartWriter(ds).parts([], empty=False)) == []
    with pytest.raises(InvalidInput, match="part_limit"):
        ParquetPartWriter(ds, 50_001)


def seed(world: World, account: str = "acme") -> None:
    generate_account(world.source_engine, account, DAY0 - HOUR_MS, DAY0 + DAY_MS, scale=SMALL)


def source_count(world: World, dataset: str, window: Window) -> int:
    return world.source.count_window(dataset, "acme", window)


def run_through(world: World, runner: Any, export_id: str, until_ms: int, step_ms: int = HOUR_MS) -> None:
    for end in range(DAY0 + step_ms, until_ms + 1, step_ms):
        world.clock.now_ms = end + LAG
        for dataset in DATASETS:
            runner.run_day(export_id, dataset, DAY)


def bucket_files(root: Path, dataset: str) -> list[Path]:
    return sorted(p for p in (root / dataset).rglob("*") if p.is_file())


def test_a_parquet_export_delivers_every_row_once_and_duckdb_loads_it_with_the_docs_statement(
    world: World,
) -> None:
    seed(world)
    export = world.local_export(file_format="parquet", frequency="1h")
    root = world.root / "bucket"
    runner = world.runner(part_limit=40)
    run_through(world, runner, export.id, DAY0 + DAY_MS)
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    runner.run_day(export.id, "subscribers", DAY)
    for dataset in EVENT_DATASETS:
        files = bucket_files(root, dataset)
        assert files and all(p.name.endswith(".parquet") for p in files)
        assert all(parse_key(p.relative_to(root).as_posix()) is not None for p in files)
        rows = [r for p in files for r in part_rows(p.name, p.read_bytes())]
        expected = source_count(world, dataset, Window(DAY0, DAY0 + DAY_MS))
        assert len(rows) == len({r["id"] for r in rows}) == expected > 0
    snapshot = bucket_files(root, "subscribers")
    names = [p.name for p in snapshot]
    assert "_SUCCESS" in names and "subscribers-0000.parquet" in names
    assert all(n == "_SUCCESS" or n.endswith(".parquet") for n in names)
    assert check_layout(root) == []
    report = verify_bucket(LocalBucket(root), workers=1)
    assert report.ok, report.problems
    assert sum(s.rows for s in report.datasets.values()) > 0
    # The docs' DuckDB statement, run for real over the folder.
    con = duckdb.connect()
    for dataset in DATASETS:
        con.execute(warehouse_parquet.duckdb(DATASETS[dataset], root=str(root)))
    with world.source_engine.connect() as conn:
        n_email = conn.execute(
            sa.text(
                "SELECT count(*) FROM email_events WHERE account_id = 'acme' AND recorded_at > '2026-09-30T00:00:00.000Z' AND recorded_at <= '2026-10-01T00:00:00.000Z'"
            )
        ).scalar()
        n_subs = conn.execute(sa.text("SELECT count(*) FROM subscribers WHERE account_id = 'acme'")).scalar()
    assert con.execute("SELECT count(*) FROM email_events_parquet").fetchone() == (n_email,)
    assert con.execute("SELECT count(*) FROM subscribers_parquet").fetchone() == (n_subs,)
    kinds = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE custom_events_parquet)").fetchall())
    assert kinds["recorded_at"] == "TIMESTAMP WITH TIME ZONE" and kinds["properties"] == "JSON"
    assert kinds["date"] == "DATE"
    (city,) = con.execute(
        "SELECT properties->>'source' FROM custom_events_parquet WHERE properties->>'source' IS NOT NULL LIMIT 1"
    ).fetchone()
    assert isinstance(city, str) and city
    tags = con.execute("SELECT typeof(tags) FROM subscribers_parquet LIMIT 1").fetchone()
    assert tags == ("VARCHAR[]",)


def test_a_format_change_applies_from_the_next_window_and_never_splits_one(world: World) -> None:
    seed(world)
    export = world.local_export(datasets=("custom_events",), frequency="1h")
    root = world.root / "bucket"
    runner = world.runner(part_limit=5)
    api = Exports(world.store, world.policy, clock=world.clock)
    run_through(world, runner, export.id, DAY0 + 2 * HOUR_MS)
    first = Window(DAY0, DAY0 + HOUR_MS)
    assert api.change_format(export.id, "parquet").format == "parquet"
    with pytest.raises(InvalidInput, match="format.*jsonl.gz, parquet"):
        api.change_format(export.id, "csv")
    # A row that appears late inside the first window (JSONL): its late part stays JSONL.
    with world.source_engine.connect() as conn:
        row = list(
            conn.execute(
                sa.text("SELECT * FROM custom_events WHERE recorded_at > :a ORDER BY recorded_at LIMIT 1"),
                {"a": "2026-09-30T00:00:00.000Z"},
            ).one()
        )
    row[1] = row[1] + "_late"
    insert_rows(world.source_engine, "custom_events", [tuple(row)])
    runner.write_window(export.id, "custom_events", first)
    run_through(world, runner, export.id, DAY0 + 4 * HOUR_MS)
    by_window: dict[Window, set[str]] = {}
    for p in bucket_files(root, "custom_events"):
        parsed = parse_key(p.relative_to(root).as_posix())
        assert parsed is not None and parsed.window is not None and parsed.format is not None
        by_window.setdefault(parsed.window, set()).add(parsed.format)
    assert all(len(formats) == 1 for formats in by_window.values()), by_window
    windows = sorted(by_window)
    assert [by_window[w] for w in windows] == [{"jsonl.gz"}] * 2 + [{"parquet"}] * 2
    assert [w.from_ms for w in windows[1:]] == [w.to_ms for w in windows[:-1]], "the chain has no gap"
    report = verify_bucket(LocalBucket(root), workers=1)
    assert report.ok, report.problems
    ids = [r["id"] for p in bucket_files(root, "custom_events") for r in part_rows(p.name, p.read_bytes())]
    assert len(ids) == len(set(ids)) == source_count(world, "custom_events", Window(DAY0, DAY0 + 4 * HOUR_MS))


def test_verify_reports_a_damaged_or_foreign_parquet_part(world: World) -> None:
    seed(world)
    export = world.local_export(datasets=("email_events",), file_format="parquet")
    root = world.root / "bucket"
    run_through(world, world.runner(), export.id, DAY0 + 2 * HOUR_MS)
    first, second = bucket_files(root, "email_events")[:2]
    first.write_bytes(first.read_bytes()[:-40])
    pq.write_table(pa.table({"id": ["x"]}), second)
    kinds = {p.kind: p.key for p in verify_bucket(LocalBucket(root), workers=1).problems}
    assert kinds.keys() >= {"corrupt_parquet", "schema_mismatch"}, kinds
    assert kinds["corrupt_parquet"].endswith(first.name) and kinds["schema_mismatch"].endswith(second.name)


@pytest.fixture(params=["plain", "write-once"])
def proxy(moto: Any, request: pytest.FixtureRequest) -> Any:
    server = fp.FaultProxy(moto.port, write_once=request.param == "write-once")
    try:
        yield server
        assert server.overwrites == [], f"PUTs to an existing key: {server.overwrites}"
    finally:
        server.close()


def test_parquet_under_store_faults_on_plain_and_create_only_buckets(world: World, moto: Any, proxy: Any) -> None:
    s3 = moto.admin_client()
    seed(world)
    export = s3_export(world, s3, proxy, datasets=("email_events", "custom_events"), file_format="parquet")
    runner = s3_runner(world, part_limit=25, max_attempts=2)
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS
    proxy.add(fp.slow_down(match="-0000.parquet", times=1))
    proxy.add(fp.reset(match="custom_events-", times=1))
    # The store keeps an upload but the reply is lost: the re-send must be recognised, not overwrite.
    proxy.add(fp.lost_reply(match="email_events-", times=2))
    failures = 0
    for _attempt in range(6):
        errors = 0
        for dataset in ("email_events", "custom_events"):
            try:
                runner.run_day(export.id, dataset, DAY)
            except Exception:
                errors += 1
        failures += errors
        if not errors:
            break
        world.clock.now_ms += 6 * HOUR_MS
    puts = [r for r in proxy.puts(".parquet")]
    assert puts and all(".parquet" in r.path for r in proxy.puts("/sequenzy/email_events/"))
    report = audit_export(world.store, world.source_engine, s3, export.id)
    report.assert_clean()
    assert report.datasets["email_events"].expected > 0


def test_warehouse_statements_select_parquet_parts_only_and_use_the_contract() -> None:
    ds = DATASETS["custom_events"]
    for name, make in warehouse_parquet.GENERATORS.items():
        text = make(ds)
        assert "parquet" in text.lower() and ".jsonl" not in text, name
        assert "QUALIFY" in text or "rn = 1" in text, name
    assert "MATCH_BY_COLUMN_NAME" in warehouse_parquet.snowflake(
        ds
    ) and "TYPE = PARQUET" in warehouse_parquet.snowflake(ds)
    assert "format = 'PARQUET'" in warehouse_parquet.bigquery(ds)
    assert "FORMAT AS PARQUET" in warehouse_parquet.redshift(ds)
    assert "read_parquet(" in warehouse_parquet.duckdb(ds) and "hive_partitioning = true" in warehouse_parquet.duckdb(
        ds
    )
    assert warehouse.main(["duckdb", "custom_events", "--format", "csv"]) == 2


def test_size_against_jsonl_is_smaller() -> None:
    rows = generated("email_events", n_sends=400)
    ds = DATASETS["email_events"]
    (parquet,) = ParquetPartWriter(ds).parts([rows])
    (jsonl,) = PartWriter(ds).parts([rows])
    assert parquet.size < jsonl.size


def test_the_published_parquet_schema_files_match_what_the_writer_writes() -> None:
    from seqexport_dagster.contract import schema_publish
    from seqexport_dagster.contract.schema import parquet_schema_text

    files = sorted(p.name for p in schema_publish.PARQUET_SCHEMA_DIR.glob("*.json"))
    assert files == sorted(f"{name}.json" for name in DATASETS)
    for ds in DATASETS.values():
        published = (schema_publish.PARQUET_SCHEMA_DIR / f"{ds.name}.json").read_text()
        assert published == parquet_schema_text(ds), (
            f"run `python -m seqexport_dagster.contract.schema_publish` ({ds.name})"
        )
        columns = json.loads(published)["columns"]
        written = arrow_schema(ds)
        assert [c["name"] for c in columns] == written.names
        shown = [str(f.type).replace("list<item: ", "list<") for f in written]
        assert [c["type"].removesuffix(" (JSON text)") for c in columns] == shown
        assert [c["nullable"] for c in columns] == [f.nullable for f in written]


def test_the_customer_doc_shows_the_generated_parquet_statements() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "customers.md").read_text()
    ds = DATASETS["email_events"]
    for name, make in warehouse_parquet.GENERATORS.items():
        assert make(ds) in doc, f"docs/customers.md: regenerate the {name} Parquet statement"


def test_row_groups_are_cut_by_row_count_so_big_parts_are_byte_identical_too() -> None:
    from seqexport_dagster.delivery.parquet_writer import ROW_GROUP

    ds = DATASETS["custom_events"]
    rows = generated("custom_events", n_sends=2 * ROW_GROUP + 1234)
    small = [rows[i : i + 333] for i in range(0, len(rows), 333)]
    (one,) = ParquetPartWriter(ds).parts([rows])
    (two,) = ParquetPartWriter(ds).parts(small)
    assert one.body == two.body
    meta = pq.read_metadata(io.BytesIO(one.body))
    assert meta.num_rows == len(rows) and meta.num_row_groups == 3
    assert [meta.row_group(i).num_rows for i in range(3)] == [ROW_GROUP, ROW_GROUP, 1234]


def test_the_cli_and_the_http_api_choose_and_change_the_format(run: Any) -> None:
    """Through `seqexport` locally, on PostgreSQL and against the HTTP API (the remote CLI)."""
    created = run.create_local("pq", "--datasets", "custom_events", "--format", "parquet")
    assert created["format"] == "parquet"
    assert run.ok("format", created["id"], "jsonl.gz")["format"] == "jsonl.gz"
    bad = run("format", created["id"], "csv", "--json")
    assert bad.code != 0 and "format" in bad.json["error"]["message"] and "parquet" in bad.json["error"]["message"]
    refused = run("create", "--account", "acme", "--provider", "local", "--bucket", str(run.world.root / "x"),
                  "--format", "orc", "--json")  # fmt: skip
    assert refused.code != 0 and "jsonl.gz, parquet" in refused.json["error"]["message"]
    assert run.ok("status", created["id"])["format"] == "jsonl.gz"


@pytest.mark.parametrize("file_format", ["parquet", "jsonl.gz"])
def test_timestamps_of_years_1_999_and_9999_round_trip_and_verify_passes(world: World, file_format: str) -> None:
    """Issue 47: ``occurred_at`` of 0001-01-01 is valid under the published schema, and pyarrow and
    DuckDB read it; verify rendered it ``1-01-01T…`` (``strftime("%Y")``) and called the Parquet
    part a schema mismatch, while the same rows as JSONL passed."""
    stamps = ["0001-01-01T00:00:00.000Z", "0999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"]
    window = Window(DAY0, DAY0 + HOUR_MS)
    rows = late_rows(window, len(stamps), "years")
    rows = [(*row[:3], stamp, *row[4:]) for row, stamp in zip(rows, stamps, strict=True)]
    insert_rows(world.source_engine, "email_events", rows)
    export = world.local_export(datasets=("email_events",), file_format=file_format)
    root = world.root / "bucket"
    world.clock.now_ms = window.to_ms + LAG
    world.runner().run_day(export.id, "email_events", DAY)
    (path,) = bucket_files(root, "email_events")
    read = part_rows(path.name, path.read_bytes())
    assert sorted(r["occurred_at"] for r in read) == stamps
    if file_format == "parquet":
        column = pq.read_table(path).column("occurred_at").to_pylist()
        assert sorted(v.year for v in column) == [1, 999, 9999]
    report = verify_bucket(LocalBucket(root), workers=1)
    assert report.ok, report.render()
    assert report.datasets["email_events"].rows == len(stamps)


def _reference_part(ds: Any, rows: list[tuple[Any, ...]]) -> bytes:
    """The part as pyarrow's public API writes it: ``pa.array`` columns, Arrow's cast of the timestamp
    text, ``pyarrow.parquet.ParquetWriter`` with the writer's settings (issue 46: the writer builds its
    columns over whole columns and uses pyarrow's writer class directly; the bytes must not change)."""
    from seqexport_dagster.delivery.parquet_writer import COMPRESSION, COMPRESSION_LEVEL, ROW_GROUP
    from seqexport_dagster.delivery.values import RowChecker

    schema = arrow_schema(ds)
    checked = RowChecker(ds)(rows)
    columns = []
    for i, f in enumerate(ds.fields):
        values = [row[i] for row in checked]
        if f.type == "timestamp":
            columns.append(pa.array(values, pa.string()).cast(schema.field(i).type))
        elif f.type == "array":
            columns.append(pa.array([None if v is None else json.loads(v) for v in values], pa.list_(pa.string())))
        else:
            columns.append(pa.array(values, schema.field(i).type))
    sink = io.BytesIO()
    with pq.ParquetWriter(
        sink, schema, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL, use_dictionary=False
    ) as writer:
        writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=ROW_GROUP)
    return sink.getvalue()


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_part_bytes_match_pyarrow_parquet_writer(dataset: str) -> None:
    ds = DATASETS[dataset]
    rows = generated(dataset, n_sends=300)
    # Text the fast paths treat apart: wide characters, a mostly null column, the contract's extreme years.
    string_at = [i for i, f in enumerate(ds.fields) if f.type == "string" and f.nullable]
    stamp_at = [i for i, f in enumerate(ds.fields) if f.type == "timestamp"]
    stamps = ["0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z", "2024-02-29T12:00:00.001Z"]
    varied = []
    for n, row in enumerate(rows):
        values = list(row)
        if string_at:
            values[string_at[0]] = ["Zürich 東京 🙂", None, "ascii", ""][n % 4]
        if stamp_at and n < len(stamps):
            values[stamp_at[-1]] = stamps[n]
        varied.append(tuple(values))
    for case in (rows, varied):
        (part,) = ParquetPartWriter(ds).parts([case])
        assert part.body == _reference_part(ds, case)


def test_column_builders_give_arrows_own_arrays() -> None:
    from seqexport_dagster.delivery import parquet_writer as pw

    strings: list[list[Any]] = [[], ["a", "bc", ""], ["é", None, "x"], [None, None, "x"], ["x", None, None, "y"]]
    for values in strings:
        assert pw._strings(values).equals(pa.array(values, pa.string())), values
    rng = random.Random(46)
    first, last = parse_iso_ms("0001-01-01T00:00:00.000Z"), parse_iso_ms("9999-12-31T23:59:59.999Z")
    millis = [rng.randint(first, last) for _ in range(3000)] + [first, last, 0, -1, 951_782_400_000]
    texts: list[Any] = [dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=m) for m in millis]
    texts = [f"{d.year:04d}-{d:%m-%dT%H:%M:%S}.{d.microsecond // 1000:03d}Z" for d in texts] + [None]
    expected = pa.array(texts, pa.string()).cast(pw.TIMESTAMP)
    assert pw._timestamps(texts).equals(expected)
    assert pw._timestamps(texts).cast(pa.int64()).to_pylist() == [*millis, None]


#: What a worker writing Parquet from SQLite never loads (issue 46, peak memory): pandas (``pa.array``
#: and ``pyarrow.parquet`` look for it, +55 MB), ``pyarrow.parquet`` with ``pyarrow.fs`` and its bucket
#: filesystems (+13 MB), ``pyarrow.compute`` (+12 MB: the Arrow checks use NumPy), the ADBC driver, and
#: psycopg2 with its libpq and OpenSSL (+4 MB: a SQLite source never uses it;
#: `source.reader._source_errors`). Since SQLite windows are read into Arrow (`source.sqlite_read`),
#: `delivery.arrow_check` is on this path: it loads nothing of the above.
NEVER_IN_A_SQLITE_PARQUET_WORKER = (
    "pandas",
    "pyarrow.parquet",
    "pyarrow.fs",
    "pyarrow.compute",
    "pyarrow.dataset",
    "adbc_driver_manager",
    "adbc_driver_postgresql",
    "psycopg2",
    "dagster",
    "alembic",
)


def test_a_parquet_worker_on_sqlite_loads_nothing_it_does_not_use(tmp_path: Path) -> None:
    """Each of these modules is resident memory in every run worker (docs/performance.md, peak RSS):
    one that creeps back onto the write path fails here, in a process that writes real parts."""
    import subprocess
    import sys

    from seqexport_dagster.store.crypto import new_key_spec
    from seqexport_dagster_tests.support.processes import ROOT, run_in_group

    key_spec = new_key_spec("t1")
    world = World.in_files(tmp_path, DAY0, key_spec)
    try:
        seed(world)
        export = world.local_export(datasets=("email_events",), file_format="parquet")
    finally:
        world.dispose()
    now = DAY0 + 2 * HOUR_MS + LAG
    listing = tmp_path / "modules.txt"
    command = [
        sys.executable, "-m", "seqexport_dagster_tests.support.worker_imports", str(listing),
        world.control_url, world.source_url, key_spec, export.id, str(now),
    ]  # fmt: skip
    done = run_in_group(command, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
                        stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) > 0, "the worker wrote rows"
    assert [p.suffix for p in bucket_files(tmp_path / "bucket", "email_events")][:1] == [".parquet"]
    modules = set(listing.read_text().split())
    assert "pyarrow" in modules and "seqexport_dagster.delivery.parquet_writer" in modules
    loaded = sorted(
        m for m in modules if any(m == r or m.startswith(r + ".") for r in NEVER_IN_A_SQLITE_PARQUET_WORKER)
    )
    assert loaded == []
