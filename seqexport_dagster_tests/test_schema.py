"""The row contract (DESIGN §8): defined once, published without drift, kept by every written row."""

from __future__ import annotations

import gzip
import json
import random

import jsonschema
import pytest

from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS, json_schema, json_schema_text, schema_tables
from seqexport_dagster.contract.schema_publish import CUSTOMER_DOC, SCHEMA_DIR, render_tables
from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.delivery.writer import PartWriter
from seqexport_dagster.demo import generator
from seqexport_dagster.source.tables import TABLES
from seqexport_dagster_tests.support.world import DAY0

#: DESIGN §8, field by field: the published contract, written out independently of the code.
CONTRACT = {
    "email_events": (
        "id event_type occurred_at recorded_at subscriber_id email campaign_id sequence_id message_id subject "
        "clicked_url bounce_type bounce_reason user_agent ip_address"
    ),
    "sms_events": (
        "id event_type occurred_at recorded_at subscriber_id phone campaign_id sequence_id message_id "
        "segments error_code clicked_url reply_text"
    ),
    "custom_events": "id name occurred_at recorded_at subscriber_id email properties",
    "subscribers": ("id email phone first_name last_name status tags attributes created_at updated_at unsubscribed_at"),
}
ENUMS = {
    ("email_events", "event_type"): {"sent", "delivered", "opened", "clicked", "bounced", "complained", "unsubscribed"},
    ("email_events", "bounce_type"): {"hard", "soft"},
    ("sms_events", "event_type"): {"sent", "delivered", "failed", "clicked", "replied", "opted_out"},
    ("subscribers", "status"): {"subscribed", "unsubscribed", "bounced", "complained"},
}


def test_datasets_and_field_order_match_the_contract() -> None:
    assert list(DATASETS) == ["email_events", "sms_events", "custom_events", "subscribers"]
    assert EVENT_DATASETS == ("email_events", "sms_events", "custom_events")
    for name, fields in CONTRACT.items():
        assert DATASETS[name].field_names == tuple(fields.split()), name
    for (name, field), values in ENUMS.items():
        (f,) = [f for f in DATASETS[name].fields if f.name == field]
        assert set(f.enum) == values


def test_no_field_named_date_and_no_duplicates() -> None:
    for ds in DATASETS.values():
        assert "date" not in ds.field_names, "would collide with the Hive partition column"
        assert len(set(ds.field_names)) == len(ds.field_names)
        assert ds.field_names[0] == "id"


def test_order_and_timestamps() -> None:
    for name in EVENT_DATASETS:
        ds = DATASETS[name]
        assert ds.order_by == ("recorded_at", "id")
        types = {f.name: f for f in ds.fields}
        assert types["recorded_at"].type == "timestamp" and not types["recorded_at"].nullable
        assert types["occurred_at"].type == "timestamp" and not types["occurred_at"].nullable
    assert DATASETS["subscribers"].order_by == ("id",)


def test_source_tables_follow_the_contract() -> None:
    for name, ds in DATASETS.items():
        assert [c.name for c in TABLES[name].columns] == ["account_id", *ds.field_names]


def test_published_schema_files_do_not_drift() -> None:
    names = sorted(p.name for p in SCHEMA_DIR.glob("*.json"))
    assert names == sorted(f"{n}.json" for n in DATASETS)
    for ds in DATASETS.values():
        assert (SCHEMA_DIR / f"{ds.name}.json").read_text() == json_schema_text(ds), (
            f"schemas/{ds.name}.json drifted: run python -m seqexport_dagster.contract.schema_publish"
        )


def test_customer_doc_tables_do_not_drift() -> None:
    text = CUSTOMER_DOC.read_text()
    assert schema_tables() in text
    assert render_tables(text) == text, (
        "docs/customers.md tables drifted: run python -m seqexport_dagster.contract.schema_publish"
    )


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_written_row_has_every_field_in_order_and_validates(name: str) -> None:
    """Rows from the generator, through the writer, are valid against the published JSON Schema."""
    rng = random.Random(11)
    subs = generator.subscribers(rng, "acme", 50, DAY0)
    source = {
        "subscribers": subs,
        "email_events": list(generator.email_events(rng, "acme", subs, DAY0, DAY0 + DAY_MS, 300)),
        "sms_events": list(generator.sms_events(rng, "acme", subs, DAY0, DAY0 + DAY_MS, 200)),
        "custom_events": list(generator.custom_events(rng, "acme", subs, DAY0, DAY0 + DAY_MS, 200)),
    }[name]
    rows = [row[1:] for row in source]  # without account_id, as the reader selects them
    ds = DATASETS[name]
    validator = jsonschema.Draft202012Validator(json_schema(ds), format_checker=jsonschema.FormatChecker())
    parts = list(PartWriter(ds, part_limit=97).parts([rows]))
    written = [json.loads(line) for p in parts for line in gzip.decompress(p.body).splitlines()]
    assert len(written) == len(rows)
    for row in written:
        assert list(row) == list(ds.field_names)
        validator.validate(row)
    nulls = {f for f in ds.field_names if any(r[f] is None for r in written)}
    assert nulls <= {f.name for f in ds.fields if f.nullable}
