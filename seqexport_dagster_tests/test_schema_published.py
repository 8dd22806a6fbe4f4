"""The published contract: generated files in step with `schema.DATASETS`, the versioning policy, and
rows that a real writer produces validating against the published JSON Schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from seqexport_dagster.contract import schema_publish
from seqexport_dagster.contract.schema import DATASETS, SCHEMA_VERSION, json_schema, json_schema_text, schema_tables
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window
from seqexport_dagster.delivery.writer import PartWriter
from seqexport_dagster.demo.generator import generate_account
from seqexport_dagster.management.verify import row_problem
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store.database import create_engine
from seqexport_dagster_tests.support.world import DAY0

REPO = Path(__file__).parent.parent

#: Schema v1 as published. Policy: later versions may only append nullable fields; a field is never
#: renamed, retyped, reordered or removed, and a nullable field never becomes required.
V1: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "email_events": (
        ("id", "string", False), ("event_type", "string", False), ("occurred_at", "timestamp", False),
        ("recorded_at", "timestamp", False), ("subscriber_id", "string", True), ("email", "string", True),
        ("campaign_id", "string", True), ("sequence_id", "string", True), ("message_id", "string", True),
        ("subject", "string", True), ("clicked_url", "string", True), ("bounce_type", "string", True),
        ("bounce_reason", "string", True), ("user_agent", "string", True), ("ip_address", "string", True),
    ),
    "sms_events": (
        ("id", "string", False), ("event_type", "string", False), ("occurred_at", "timestamp", False),
        ("recorded_at", "timestamp", False), ("subscriber_id", "string", True), ("phone", "string", True),
        ("campaign_id", "string", True), ("sequence_id", "string", True), ("message_id", "string", True),
        ("segments", "integer", True), ("error_code", "string", True), ("clicked_url", "string", True),
        ("reply_text", "string", True),
    ),
    "custom_events": (
        ("id", "string", False), ("name", "string", False), ("occurred_at", "timestamp", False),
        ("recorded_at", "timestamp", False), ("subscriber_id", "string", True), ("email", "string", True),
        ("properties", "object", True),
    ),
    "subscribers": (
        ("id", "string", False), ("email", "string", True), ("phone", "string", True),
        ("first_name", "string", True), ("last_name", "string", True), ("status", "string", False),
        ("tags", "array", True), ("attributes", "object", True), ("created_at", "timestamp", False),
        ("updated_at", "timestamp", False), ("unsubscribed_at", "timestamp", True),
    ),
}  # fmt: skip


def test_schema_files_match_the_definition() -> None:
    files = sorted(p.name for p in schema_publish.SCHEMA_DIR.glob("*.json"))
    assert files == sorted(f"{name}.json" for name in DATASETS)
    for ds in DATASETS.values():
        published = (schema_publish.SCHEMA_DIR / f"{ds.name}.json").read_text()
        assert published == json_schema_text(ds), (
            f"run `python -m seqexport_dagster.contract.schema_publish` ({ds.name})"
        )
        jsonschema.Draft202012Validator.check_schema(json.loads(published))


def test_customer_doc_tables_match_the_definition() -> None:
    """The row-schema tables live with their section, in the customers' document (not the README)."""
    doc = (REPO / "docs" / "customers.md").read_text()
    assert schema_publish.CUSTOMER_DOC == REPO / "docs" / "customers.md"
    assert schema_tables() in doc, "run `python -m seqexport_dagster.contract.schema_publish`"
    assert schema_publish.render_tables(doc) == doc
    assert schema_tables() not in (REPO / "README.md").read_text()


def test_versioning_policy_fields_only_appended() -> None:
    assert set(DATASETS) >= set(V1)
    for name, v1_fields in V1.items():
        current = tuple((f.name, f.type, f.nullable) for f in DATASETS[name].fields)
        assert current[: len(v1_fields)] == v1_fields, f"{name}: a v1 field was renamed, retyped or moved"
        added = DATASETS[name].fields[len(v1_fields) :]
        assert all(f.nullable for f in added), f"{name}: fields added after v1 must be nullable"
        if added:
            assert SCHEMA_VERSION > 1


def test_changelog_records_the_current_schema_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## Schema v{SCHEMA_VERSION}" in changelog
    assert "never renamed" in changelog and "retyped" in changelog
    for ds in DATASETS.values():
        assert json_schema(ds)["x-schema-version"] == SCHEMA_VERSION
        assert f"`{ds.name}`" in changelog


@pytest.fixture(scope="module")
def written_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, object]]]:
    """Rows as the writer serializes them: generated source → reader → gzip JSONL parts → decoded."""
    import gzip

    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('schema') / 'source.db'}")
    try:
        generate_account(engine, "acme", DAY0, DAY0 + 6 * HOUR_MS)
        reader = SourceReader(engine)
        rows: dict[str, list[dict[str, object]]] = {}
        for name, ds in DATASETS.items():
            batches = (
                reader.snapshot_batches("acme")
                if ds.is_snapshot
                else reader.window_batches(name, "acme", Window(DAY0, DAY0 + DAY_MS))
            )
            rows[name] = [
                json.loads(line)
                for part in PartWriter(ds, part_limit=500).parts(batches)
                for line in gzip.decompress(part.body).splitlines()
            ]
        return rows
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", list(DATASETS))
def test_written_rows_validate_against_the_published_schema(
    written_rows: dict[str, list[dict[str, object]]], name: str
) -> None:
    schema = json.loads((schema_publish.SCHEMA_DIR / f"{name}.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    rows = written_rows[name]
    assert len(rows) > 50
    for row in rows:
        errors = list(validator.iter_errors(row))
        assert not errors, (row["id"], [e.message for e in errors])
        assert list(row) == list(DATASETS[name].field_names)  # field order, which JSON Schema cannot say
        assert row_problem(DATASETS[name], row) is None  # verify's fast check agrees


def test_json_schema_rejects_what_verify_rejects(written_rows: dict[str, list[dict[str, object]]]) -> None:
    """Both checks refuse the same broken rows: a retyped, a missing and an extra field, a bad timestamp."""
    validator = jsonschema.Draft202012Validator(json.loads(json_schema_text(DATASETS["sms_events"])))
    base = next(r for r in written_rows["sms_events"] if r["segments"] is not None)
    broken = [
        {**base, "segments": "2"},
        {k: v for k, v in base.items() if k != "phone"},
        {**base, "date": "2026-09-30"},
        {**base, "occurred_at": "2026-09-30 12:00:00"},
        {**base, "event_type": "opened"},  # an email event type, not an SMS one
    ]
    for row in broken:
        assert not validator.is_valid(row), row
        assert row_problem(DATASETS["sms_events"], row) is not None, row
