"""Hostile source values (issue 39): a value never forges a row, never replaces a field, and a value
that cannot be typed stops its window in both formats with one specific error (`delivery.values`).

Through the real runner, on the real databases, read back with DuckDB as a customer loads the files.
"""

from __future__ import annotations

import datetime as dt
import gc
import gzip
import json
import sys
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FileFormat
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, iso_ms
from seqexport_dagster.delivery.values import RowChecker, json_value
from seqexport_dagster.demo.generator import insert_rows
from seqexport_dagster.errors import PermanentError, UntypeableValue
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
WINDOW = Window(DAY0, DAY0 + HOUR_MS)


def custom(row_id: str, properties: str | None, *, at: int = 60_000, occurred: str | None = None) -> tuple[Any, ...]:
    return ("acme", row_id, "signup", occurred or iso_ms(DAY0 + at), iso_ms(DAY0 + at), "sub_1", "a@example.com", properties)


def lines(root: Path, dataset: str) -> list[bytes]:
    out: list[bytes] = []
    for path in sorted((root / "bucket" / dataset).rglob("*.jsonl.gz")):
        out += gzip.decompress(path.read_bytes()).splitlines()
    return out


#: Valid JSON whose raw text spans three lines, the middle one a complete row of its own: pasted into a
#: JSON line it planted the forged row (security review, on bfe50bc).
FORGING_JSON = '{"note":\n{"id":"evt_FORGED","name":"forged","occurred_at":"2026-09-30T00:00:01.000Z"}\n}'


def test_a_postgresql_json_value_spanning_lines_is_one_value_on_one_line_and_forges_no_row(pg_world: World) -> None:
    with pg_world.source_engine.begin() as conn:  # docs/operators.md allows a json column for properties
        conn.execute(sa.text("ALTER TABLE custom_events ALTER COLUMN properties TYPE json USING properties::json"))
    insert_rows(pg_world.source_engine, "custom_events", [custom("cev_1", FORGING_JSON), custom("cev_2", '{"a": 1}', at=90_000)])
    export = pg_world.local_export(datasets=("custom_events",), frequency="1h")
    pg_world.clock.now_ms = DAY0 + 2 * HOUR_MS
    pg_world.runner().run_day(export.id, "custom_events", DAY)
    got = lines(pg_world.root, "custom_events")
    assert [json.loads(line)["id"] for line in got] == ["cev_1", "cev_2"], "one line per source row, no forged row"
    assert json.loads(got[0])["properties"] == json.loads(FORGING_JSON)
    folder = pg_world.root / "bucket" / "custom_events"
    loaded = duckdb.sql(f"SELECT id FROM read_json_auto('{folder}/*/*.jsonl.gz') ORDER BY id").fetchall()
    assert loaded == [("cev_1",), ("cev_2",)]


@pytest.mark.parametrize("file_format", ["jsonl.gz", "parquet"])
def test_a_text_value_with_trailing_fields_is_refused_naming_export_window_row_and_field(
    world: World, file_format: FileFormat
) -> None:
    """``{},"id":"evt_FORGED3"`` replaced the row's id on bfe50bc and `verify` saw nothing."""
    insert_rows(world.source_engine, "custom_events", [custom("cev_ok", '{"a": 1}'), custom("cev_bad", '{},"id":"evt_FORGED3"', at=90_000)])
    export = world.local_export(datasets=("custom_events",), frequency="1h", file_format=file_format)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS
    with pytest.raises(UntypeableValue) as raised:
        world.runner().write_window(export.id, "custom_events", WINDOW)
    message = str(raised.value)
    for named in (export.id, "custom_events", str(WINDOW), "'cev_bad'", "field properties", "one JSON object"):
        assert named in message, (named, message)
    assert "FORGED" not in message, "the value itself is never shown"
    assert isinstance(raised.value, PermanentError) and not raised.value.retryable
    (state,) = world.store.get_export(export.id).datasets
    assert state.last_error == message and state.position_ms == DAY0, "the status shows it; nothing committed"
    delivered = [json.loads(line)["id"] for line in lines(world.root, "custom_events")]
    assert "evt_FORGED3" not in delivered


#: (dataset, field, a value neither format can type): each failed ``internal error ArrowInvalid`` (or
#: OverflowError) on every retry of a Parquet export on bfe50bc, while JSONL passed it on untyped.
UNTYPEABLE = [
    ("email_events", "occurred_at", "12abc"),
    ("email_events", "occurred_at", "2026-13-45T99:00:00.000Z"),
    ("email_events", "occurred_at", "2026-09-30T00:01:00.000+0100"[:24]),
    ("sms_events", "segments", float("inf")),
    ("sms_events", "segments", "12abc"),
    ("sms_events", "segments", 1.5),
    ("custom_events", "properties", '["not", "an", "object"]'),
    ("custom_events", "properties", "{broken"),
]


def hostile_row(dataset: str, field: str, value: Any) -> tuple[Any, ...]:
    ds = DATASETS[dataset]
    base: dict[str, Any] = {f.name: None for f in ds.fields}
    base.update(id="row_bad", occurred_at=iso_ms(DAY0 + 60_000), recorded_at=iso_ms(DAY0 + 60_000), event_type="sent")
    if dataset == "custom_events":
        base.update(name="signup", event_type=None)
    base[field] = value
    return ("acme", *(base[name] for name in ds.field_names))


@pytest.mark.parametrize("file_format", ["jsonl.gz", "parquet"])
@pytest.mark.parametrize(("dataset", "field", "value"), UNTYPEABLE)
def test_a_value_neither_format_can_type_fails_the_window_with_the_same_named_error(
    world: World, file_format: FileFormat, dataset: str, field: str, value: Any
) -> None:
    insert_rows(world.source_engine, dataset, [hostile_row(dataset, field, value)])
    export = world.local_export(datasets=(dataset,), frequency="1h", file_format=file_format)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS
    runner = world.runner()
    for _ in range(2):  # the same specific error on every retry, never an internal error
        with pytest.raises(UntypeableValue) as raised:
            runner.write_window(export.id, dataset, WINDOW)
        assert f"row 'row_bad': field {field} holds a value that is not" in str(raised.value)
        assert str(WINDOW) in str(raised.value) and export.id in str(raised.value)
    (state,) = world.store.get_export(export.id).datasets
    assert state.last_error is not None and "internal error" not in state.last_error
    assert state.position_ms == DAY0


def test_the_checker_re_encodes_json_and_accepts_every_contract_value() -> None:
    checker = RowChecker(DATASETS["subscribers"])
    ds = DATASETS["subscribers"]
    row: dict[str, Any] = {f.name: None for f in ds.fields}
    row.update(
        id="sub_1", status="subscribed", tags='[ "a",\n "b" ]', attributes='{ "k" :\n [1, {"x": null}] }',
        created_at="0001-01-01T00:00:00.000Z", updated_at="9999-12-31T23:59:59.999Z",
    )  # fmt: skip
    (checked,) = checker([tuple(row[n] for n in ds.field_names)])
    by_name = dict(zip(ds.field_names, checked, strict=True))
    assert by_name["tags"] == '["a","b"]' and by_name["attributes"] == '{"k":[1,{"x":null}]}'
    assert by_name["created_at"] == "0001-01-01T00:00:00.000Z"
    for bad, kind in (('["a", 1]', "array"), ("{} {}", "object"), ("1", "object"), ("", "object")):
        with pytest.raises(ValueError):
            json_value(bad, kind)


def test_no_value_splits_a_line_for_a_reader_that_splits_on_unicode_line_breaks(world: World) -> None:
    """U+2028, U+2029 and NEL are legal unescaped inside JSON strings, but Python's ``str.splitlines``
    (and older JavaScript) breaks lines there: the widened simulator's loader read a part as a broken
    line. Every line now escapes them, in text fields and JSON values alike, losslessly."""
    breaks = "a\u2028b\u2029c\x85d"
    insert_rows(world.source_engine, "custom_events", [
        ("acme", "cev_lb", breaks, iso_ms(DAY0 + 60_000), iso_ms(DAY0 + 60_000), "sub_1", "a@example.com",
         json.dumps({"s": breaks, "k\u2028": "\u2029"}, ensure_ascii=False)),
    ])  # fmt: skip
    export = world.local_export(datasets=("custom_events",), frequency="1h")
    world.clock.now_ms = DAY0 + 2 * HOUR_MS
    world.runner().write_window(export.id, "custom_events", WINDOW)
    (path,) = (world.root / "bucket" / "custom_events").rglob("*.jsonl.gz")
    text = gzip.decompress(path.read_bytes()).decode()
    assert len(text.splitlines()) == 1 and "\u2028" not in text and "\\u2028" in text
    row = json.loads(text)
    assert row["name"] == breaks and row["properties"] == {"s": breaks, "k\u2028": "\u2029"}


def test_checking_in_many_threads_at_once_leaves_the_collector_on() -> None:
    """The checker pauses the (process-wide) collector around its typed copy of a batch; a batch
    run checks several exports at once in threads. With threads switching every microsecond, a
    bare isenabled/disable/enable per call left it off for good (found in review); the shared
    pause turns it back on when the last thread leaves."""
    ds = DATASETS["subscribers"]
    row: dict[str, Any] = {f.name: None for f in ds.fields}
    row.update(id="sub_1", status="subscribed", created_at=iso_ms(DAY0), updated_at=iso_ms(DAY0))
    batch = [tuple(row[n] for n in ds.field_names)] * 4
    checker = RowChecker(ds)

    def check() -> None:
        for _ in range(3000):
            checker(batch)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=check) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert gc.isenabled()
