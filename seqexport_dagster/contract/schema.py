"""The published row contract, defined once.

Everything downstream is generated from `DATASETS`: the source tables' columns, the SELECT lists,
the serializer's field order, the JSON Schema files in ``schemas/`` and the row-schema tables of ``docs/customers.md``.

Versioning policy: fields may be added (at the end of a dataset, nullable), never renamed, retyped
or removed. Every change bumps `SCHEMA_VERSION` and gets a CHANGELOG entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from seqexport_dagster.errors import InvalidInput

SCHEMA_VERSION: Final = 1

FieldType = Literal["string", "timestamp", "integer", "object", "array"]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: FieldType
    description: str
    nullable: bool = True
    enum: tuple[str, ...] = ()
    max_length: int | None = None


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    description: str
    fields: tuple[Field, ...]
    is_snapshot: bool = False

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def order_by(self) -> tuple[str, ...]:
        return ("id",) if self.is_snapshot else ("recorded_at", "id")


def _id(what: str) -> Field:
    return Field("id", "string", f"Stable {what} id; the deduplication key.", nullable=False, max_length=128)


def _event_type(*values: str) -> Field:
    return Field("event_type", "string", "What happened.", nullable=False, enum=values)


_OCCURRED = Field("occurred_at", "timestamp", "When it happened. Use this for analysis.", nullable=False)
_RECORDED = Field(
    "recorded_at",
    "timestamp",
    "When Sequenzy recorded it. Places the row in its window: from_ms < recorded_at <= to_ms.",
    nullable=False,
)
_SUBSCRIBER = Field("subscriber_id", "string", "The subscriber's id.", max_length=128)
_CAMPAIGN = Field("campaign_id", "string", "The campaign that sent the message, if any.", max_length=128)
_SEQUENCE = Field("sequence_id", "string", "The automation sequence that sent the message, if any.", max_length=128)
_MESSAGE = Field("message_id", "string", "The message this event belongs to.", max_length=128)
_CLICKED_URL = Field("clicked_url", "string", "The link clicked (event_type clicked).", max_length=2048)

EMAIL_EVENTS = Dataset(
    "email_events",
    "One row per email event.",
    (
        _id("event"),
        _event_type("sent", "delivered", "opened", "clicked", "bounced", "complained", "unsubscribed"),
        _OCCURRED,
        _RECORDED,
        _SUBSCRIBER,
        Field("email", "string", "The recipient's address.", max_length=255),
        _CAMPAIGN,
        _SEQUENCE,
        _MESSAGE,
        Field("subject", "string", "The email's subject line.", max_length=998),
        _CLICKED_URL,
        Field("bounce_type", "string", "hard or soft (event_type bounced).", enum=("hard", "soft")),
        Field("bounce_reason", "string", "The receiving server's reason (event_type bounced).", max_length=2048),
        Field("user_agent", "string", "The reader's user agent (opened, clicked).", max_length=1024),
        Field("ip_address", "string", "The reader's IP address (opened, clicked).", max_length=45),
    ),
)

SMS_EVENTS = Dataset(
    "sms_events",
    "One row per SMS event.",
    (
        _id("event"),
        _event_type("sent", "delivered", "failed", "clicked", "replied", "opted_out"),
        _OCCURRED,
        _RECORDED,
        _SUBSCRIBER,
        Field("phone", "string", "The recipient's number, E.164 (+14155550123).", max_length=16),
        _CAMPAIGN,
        _SEQUENCE,
        _MESSAGE,
        Field("segments", "integer", "Billed SMS segments (sent)."),
        Field("error_code", "string", "The carrier's error code (failed).", max_length=64),
        _CLICKED_URL,
        Field("reply_text", "string", "The subscriber's reply (replied).", max_length=1600),
    ),
)

CUSTOM_EVENTS = Dataset(
    "custom_events",
    "One row per custom event tracked through the API.",
    (
        _id("event"),
        Field("name", "string", "The event name given when it was tracked.", nullable=False, max_length=255),
        _OCCURRED,
        _RECORDED,
        _SUBSCRIBER,
        Field("email", "string", "The subscriber's address at tracking time.", max_length=255),
        Field("properties", "object", "The event's properties, as tracked."),
    ),
)

SUBSCRIBERS = Dataset(
    "subscribers",
    "One row per subscriber, as of the snapshot; a complete day is marked by _SUCCESS.",
    (
        _id("subscriber"),
        Field("email", "string", "The subscriber's address.", max_length=255),
        Field("phone", "string", "The subscriber's number, E.164.", max_length=16),
        Field("first_name", "string", "First name.", max_length=255),
        Field("last_name", "string", "Last name.", max_length=255),
        Field(
            "status",
            "string",
            "Subscription status.",
            nullable=False,
            enum=("subscribed", "unsubscribed", "bounced", "complained"),
        ),
        Field("tags", "array", "Tags, as strings."),
        Field("attributes", "object", "Custom attributes."),
        Field("created_at", "timestamp", "When the subscriber was created.", nullable=False),
        Field("updated_at", "timestamp", "When the subscriber last changed.", nullable=False),
        Field("unsubscribed_at", "timestamp", "When the subscriber unsubscribed, if they did."),
    ),
    is_snapshot=True,
)

DATASETS: Final[dict[str, Dataset]] = {d.name: d for d in (EMAIL_EVENTS, SMS_EVENTS, CUSTOM_EVENTS, SUBSCRIBERS)}
EVENT_DATASETS: Final = tuple(name for name, d in DATASETS.items() if not d.is_snapshot)

# A field named `date` would collide with the Hive partition column of every loader.
assert all("date" not in d.field_names for d in DATASETS.values())


def dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise InvalidInput("dataset", f"{name!r} is not one of {', '.join(DATASETS)}") from None


def parse_datasets(names: list[str] | tuple[str, ...] | str) -> tuple[str, ...]:
    """Validate a dataset list (or comma-separated string); keeps the contract's order."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not names:
        raise InvalidInput("datasets", f"give at least one of {', '.join(DATASETS)}")
    given = [dataset(n).name for n in names]
    twice = sorted({n for n in given if given.count(n) > 1})
    if twice:
        raise InvalidInput("datasets", f"{', '.join(twice)} named more than once; name each dataset once")
    return tuple(n for n in DATASETS if n in given)


TIMESTAMP_PATTERN: Final = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"


def json_schema(ds: Dataset) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for f in ds.fields:
        spec: dict[str, Any] = {"description": f.description}
        base = {"timestamp": "string"}.get(f.type, f.type)
        spec["type"] = [base, "null"] if f.nullable else base
        if f.type == "timestamp":
            spec["format"] = "date-time"
            spec["pattern"] = TIMESTAMP_PATTERN
        if f.type == "array":
            spec["items"] = {"type": "string"}
        if f.enum:
            spec["enum"] = [*f.enum, None] if f.nullable else list(f.enum)
        if f.max_length:
            spec["maxLength"] = f.max_length
        properties[f.name] = spec
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://sequenzy.com/schemas/data-exports/v{SCHEMA_VERSION}/{ds.name}.json",
        "title": ds.name,
        "description": ds.description,
        "x-schema-version": SCHEMA_VERSION,
        "x-order-by": list(ds.order_by),
        "type": "object",
        "additionalProperties": False,
        "required": list(ds.field_names),
        "properties": properties,
    }


def json_schema_text(ds: Dataset) -> str:
    return json.dumps(json_schema(ds), indent=2) + "\n"


#: Each contract type as an Arrow/Parquet column type (what `parquet_writer` writes; a test holds them equal).
PARQUET_TYPES: Final[dict[str, str]] = {
    "string": "string",
    "timestamp": "timestamp[ms, tz=UTC]",
    "integer": "int64",
    "object": "string (JSON text)",
    "array": "list<string>",
}


def parquet_schema(ds: Dataset) -> dict[str, Any]:
    """The published Parquet schema of a dataset: the columns of every ``.parquet`` part, in order."""
    return {
        "$id": f"https://sequenzy.com/schemas/data-exports/v{SCHEMA_VERSION}/parquet/{ds.name}.json",
        "title": ds.name,
        "description": ds.description,
        "x-schema-version": SCHEMA_VERSION,
        "x-order-by": list(ds.order_by),
        "compression": "zstd",
        "columns": [
            {"name": f.name, "type": PARQUET_TYPES[f.type], "nullable": f.nullable, "description": f.description}
            for f in ds.fields
        ],
    }


def parquet_schema_text(ds: Dataset) -> str:
    return json.dumps(parquet_schema(ds), indent=2, ensure_ascii=False) + "\n"


_TYPE_LABEL: Final = {
    "string": "string",
    "timestamp": "timestamp (ISO-8601 UTC, ms, `Z`)",
    "integer": "integer",
    "object": "object",
    "array": "array of strings",
}


def markdown_table(ds: Dataset) -> str:
    lines = ["| # | field | type | null | description |", "|---|---|---|---|---|"]
    for i, f in enumerate(ds.fields, 1):
        desc = f.description + (f" One of: {', '.join(f.enum)}." if f.enum else "")
        lines.append(f"| {i} | `{f.name}` | {_TYPE_LABEL[f.type]} | {'yes' if f.nullable else 'no'} | {desc} |")
    return "\n".join(lines)


TABLES_BEGIN: Final = (
    "<!-- schema-tables:begin (generated by `python -m seqexport_dagster.contract.schema_publish`) -->"
)
TABLES_END: Final = "<!-- schema-tables:end -->"


def schema_tables() -> str:
    """The generated row-schema tables, between the markers `schema_publish` replaces in the customers' doc."""
    blocks = [TABLES_BEGIN, f"Schema version {SCHEMA_VERSION}.", ""]
    for ds in DATASETS.values():
        blocks += [f"#### {ds.name}", "", ds.description, "", markdown_table(ds), ""]
    blocks.append(TABLES_END)
    return "\n".join(blocks)
