"""Values of a driver's own types (issue 39, `delivery.values`): an operator's view that does not cast a
column to the contract's form (a ``timestamptz`` ``occurred_at``, a ``numeric``, a ``bytea``, ``json``
without ``::text``) hands the checker a ``datetime``, ``Decimal``, ``bytes``/``memoryview``, ``dict``…
Each is refused with `UntypeableValue` naming the row and the field, in every field type, on every path
(rows for JSONL and Parquet, Arrow batches read through ADBC for Parquet from PostgreSQL); a
``timestamptz`` ``occurred_at`` raised a bare ``TypeError`` in the timestamp check before.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import uuid
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FileFormat
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, iso_ms
from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter
from seqexport_dagster.delivery.values import ACCEPTED, RowChecker
from seqexport_dagster.demo.generator import insert_rows
from seqexport_dagster.errors import UntypeableValue
from seqexport_dagster_tests.support.world import DAY0, World

WINDOW = Window(DAY0, DAY0 + HOUR_MS)
STAMP = "2026-09-30T12:34:56.789Z"
AWARE = dt.datetime(2026, 9, 30, 12, 34, 56, 789_000, tzinfo=dt.UTC)

#: What psycopg2 (and ADBC's rows) hand over for PostgreSQL types the contract does not name.
DRIVER_VALUES: dict[str, Any] = {
    "timestamptz": AWARE,
    "timestamp": AWARE.replace(tzinfo=None),
    "date": dt.date(2026, 9, 30),
    "time": dt.time(12, 34),
    "interval": dt.timedelta(days=1),
    "numeric": decimal.Decimal("3"),
    "numeric_fraction": decimal.Decimal("3.5"),
    "float8": 3.0,
    "float8_fraction": 3.5,
    "bytea": b'{"a": 1}',
    "bytea_array": b'["a"]',
    "bytea_memoryview": memoryview(b'{"a": 1}'),
    "uuid": uuid.UUID("67689c21-4508-44d7-a75e-9e9d8349f9c2"),
    "json_object": {"a": 1},
    "json_array": ["a"],
    "bool_true": True,
    "bool_false": False,
}
#: A field of each contract type: (dataset, field), nullable and not.
FIELDS = [
    ("subscribers", "email"),
    ("subscribers", "status"),
    ("subscribers", "created_at"),
    ("subscribers", "unsubscribed_at"),
    ("subscribers", "tags"),
    ("subscribers", "attributes"),
    ("sms_events", "segments"),
]
GOOD: dict[str, dict[str, Any]] = {
    "subscribers": {
        "status": "subscribed", "email": "a@example.com", "tags": '["a"]', "attributes": '{"k": 1}',
        "created_at": STAMP, "updated_at": STAMP, "unsubscribed_at": STAMP,
    },
    "sms_events": {"event_type": "sent", "occurred_at": STAMP, "recorded_at": STAMP, "segments": 2},
    "custom_events": {"name": "signup", "occurred_at": STAMP, "recorded_at": STAMP, "properties": "{}"},
}  # fmt: skip


def row(dataset: str, row_id: str, **values: Any) -> tuple[Any, ...]:
    fields = {f: None for f in DATASETS[dataset].field_names} | GOOD[dataset] | {"id": row_id} | values
    return tuple(fields[name] for name in DATASETS[dataset].field_names)


@pytest.mark.parametrize("kind", sorted(DRIVER_VALUES))
@pytest.mark.parametrize(("dataset", "field"), FIELDS)
def test_a_driver_value_is_refused_naming_its_row_and_field_in_every_field_type(
    dataset: str, field: str, kind: str
) -> None:
    value = DRIVER_VALUES[kind]
    checker = RowChecker(DATASETS[dataset])
    assert checker([row(dataset, "row_ok")]), "the good row alone passes"
    ds_type = DATASETS[dataset].fields[DATASETS[dataset].field_names.index(field)].type
    for batch in (
        [row(dataset, "row_ok"), row(dataset, "row_bad", **{field: value}), row(dataset, "row_ok2")],
        [row(dataset, "row_bad", **{field: value})] * 3,
    ):
        with pytest.raises(UntypeableValue) as raised:
            checker(batch)
        assert (raised.value.row_id, raised.value.field) == ("row_bad", field)
        assert raised.value.accepted == ACCEPTED[ds_type]
        assert f"field {field} holds a value that is not {ACCEPTED[ds_type]}" in str(raised.value)


def test_an_aware_datetime_among_nulls_of_a_nullable_timestamp_is_named() -> None:
    batch = [row("subscribers", f"sub_{i}", unsubscribed_at=None) for i in range(5)]
    batch[3] = row("subscribers", "sub_bad", unsubscribed_at=AWARE)
    with pytest.raises(UntypeableValue) as raised:
        RowChecker(DATASETS["subscribers"])(batch)
    assert (raised.value.row_id, raised.value.field) == ("sub_bad", "unsubscribed_at")


def _arrow(dataset: str, rows: list[tuple[Any, ...]], replace: dict[str, pa.Array]) -> pa.RecordBatch:
    ds = DATASETS[dataset]
    columns = list(zip(*rows, strict=True))
    arrays = [
        replace.get(f.name) or pa.array(col, pa.int64() if f.type == "integer" else pa.string())
        for f, col in zip(ds.fields, columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, names=list(ds.field_names))


NUMERIC = pa.opaque(pa.string(), "numeric", "PostgreSQL")


@pytest.mark.parametrize(
    ("field", "column", "named"),
    [
        # ADBC's timestamptz: instants Python holds (the join raised TypeError), and 'infinity' in row 1
        # (``to_pylist`` raised OverflowError): that row is named, before the datetimes around it
        ("occurred_at", pa.array([0, 1_790_000_000_000_000, 0], pa.timestamp("us", tz="UTC")), "cev_0"),
        ("occurred_at", pa.array([0, 2**63 - 1, 0], pa.timestamp("us", tz="UTC")), "cev_1"),
        ("occurred_at", pa.array([None, 2**31 - 1, None], pa.date32()), "cev_0"),
        ("email", pa.ExtensionArray.from_storage(NUMERIC, pa.array([None, "2.5", "3"])), "cev_1"),
        ("email", pa.ExtensionArray.from_storage(NUMERIC, pa.array([None, "not a number", None])), "cev_1"),
        ("email", pa.array([None, b"b", b"c"], pa.binary()), "cev_1"),
        ("email", pa.array([None, False, True]), "cev_1"),
        ("email", pa.array([None, 2.0, 3.0]), "cev_1"),
        ("properties", pa.array([None, b"{}", b"{}"], pa.binary()), "cev_1"),
    ],
)
def test_a_driver_column_read_as_arrow_is_refused_naming_its_row_and_field(
    field: str, column: pa.Array, named: str
) -> None:
    """ADBC's binary COPY (Parquet from PostgreSQL, for a view whose columns CSV would hide) hands the
    checker Arrow columns of the driver's types: each is refused as the row path refuses psycopg2's."""
    from seqexport_dagster.delivery.arrow_check import ArrowChecker

    rows = [row("custom_events", f"cev_{i}") for i in range(3)]
    writer = ParquetPartWriter(DATASETS["custom_events"])
    checker = ArrowChecker(writer.dataset, writer.schema, writer._columns, writer._batch)
    batch = _arrow("custom_events", rows, {field: column})
    with pytest.raises(UntypeableValue) as raised:
        checker(batch)
    assert raised.value.field == field
    assert raised.value.row_id == named


#: (field, its column in the operator's view): each a PostgreSQL type the contract does not take there.
VIEWS = [
    ("occurred_at", "occurred_at::timestamptz"),
    ("occurred_at", "CASE WHEN id = 'cev_bad' THEN 'infinity'::timestamptz ELSE occurred_at::timestamptz END"),
    ("email", "CASE WHEN id = 'cev_bad' THEN 42.5 END::numeric"),
    ("email", "convert_to(email, 'UTF8')"),
]


@pytest.mark.postgres
@pytest.mark.parametrize("file_format", ["jsonl.gz", "parquet"])
@pytest.mark.parametrize(("field", "column"), VIEWS)
def test_an_operators_view_with_a_driver_typed_column_fails_the_window_naming_the_field(
    pg_world: World, file_format: FileFormat, field: str, column: str
) -> None:
    """The reported case: a view exposing ``occurred_at`` as ``timestamptz``; psycopg2 hands over
    ``datetime`` objects (JSONL), ADBC a timestamp column (Parquet). The window fails, on every retry,
    with the specific error, and nothing is delivered."""
    at = iso_ms(DAY0 + 60_000)
    insert_rows(pg_world.source_engine, "custom_events", [
        ("acme", "cev_bad", "signup", at, at, "sub_1", "a@example.com", '{"a": 1}'),
        ("acme", "cev_ok", "signup", iso_ms(DAY0 + 90_000), iso_ms(DAY0 + 90_000), "sub_1", "b@example.com", "{}"),
    ])  # fmt: skip
    columns = [column if name == field else name for name in ("account_id", *DATASETS["custom_events"].field_names)]
    names = ", ".join(
        f"{c} AS {n}" for c, n in zip(columns, ("account_id", *DATASETS["custom_events"].field_names), strict=True)
    )
    with pg_world.source_engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE custom_events RENAME TO custom_events_stored"))
        conn.execute(sa.text(f"CREATE VIEW custom_events AS SELECT {names} FROM custom_events_stored"))
    export = pg_world.local_export(datasets=("custom_events",), frequency="1h", file_format=file_format)
    pg_world.clock.now_ms = DAY0 + 2 * HOUR_MS
    runner = pg_world.runner()
    for _ in range(2):  # the same specific error on every retry, never an internal error
        with pytest.raises(UntypeableValue) as raised:
            runner.write_window(export.id, "custom_events", WINDOW)
        message = str(raised.value)
        accepted = ACCEPTED["timestamp" if field == "occurred_at" else "string"]
        for named in (export.id, str(WINDOW), "row 'cev_bad'", f"field {field} holds a value that is not {accepted}"):
            assert named in message, (named, message)
    (state,) = pg_world.store.get_export(export.id).datasets
    assert state.last_error == message and "internal error" not in message
    assert state.position_ms == DAY0, "nothing committed"
    delivered = [p for p in (pg_world.root / "bucket").rglob("*") if p.is_file()]
    assert not [p for p in delivered if "custom_events" in p.parts], "nothing delivered"
    assert not [gzip.decompress(p.read_bytes()) for p in delivered if p.name.endswith(".jsonl.gz")]
