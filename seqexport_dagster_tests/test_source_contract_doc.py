"""docs/operators.md's source contract holds: its views map a native schema onto what the reader expects.

The SQL block is run as published (only the role name is made unique) on a real PostgreSQL, over
tables with native types (uuid, timestamptz, jsonb, text[], inet) and other column names. The
exporter's own reader then reads through the views as the exporter's role, and the window read is an
index range scan in the contract's order, with no sort.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS, TIMESTAMP_PATTERN
from seqexport_dagster.contract.window import Window, parse_iso_ms
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster_tests.support.world import PG_ADMIN_URL, postgres_database

pytestmark = pytest.mark.postgres

OPERATORS = Path(__file__).resolve().parents[1] / "docs" / "operators.md"

#: A stand-in for Sequenzy's own tables: native types, its own column names.
APP_SCHEMA = """
CREATE SCHEMA app;
CREATE TABLE app.email_event (event_uuid uuid PRIMARY KEY, workspace_id text NOT NULL, kind text NOT NULL,
  happened_at timestamptz NOT NULL, inserted_at timestamptz NOT NULL, contact_id uuid, to_address text,
  campaign_id uuid, sequence_id uuid, message_id uuid, subject text, url text, bounce_type text,
  bounce_reason text, user_agent text, ip inet);
CREATE TABLE app.contact (contact_uuid uuid PRIMARY KEY, workspace_id text NOT NULL, email text, phone text,
  first_name text, last_name text, status text NOT NULL, tags text[], attributes jsonb,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, unsubscribed_at timestamptz);
INSERT INTO app.email_event (event_uuid, workspace_id, kind, happened_at, inserted_at, to_address, ip)
SELECT gen_random_uuid(), a, 'sent', ts - interval '1 minute', ts, 'a@example.com', '203.0.113.7'
FROM generate_series(timestamptz '2026-09-30 00:00:00.123+00', timestamptz '2026-09-30 03:00:00+00',
                     interval '2 seconds') ts, (VALUES ('acme'), ('globex')) AS accounts(a);
INSERT INTO app.contact (contact_uuid, workspace_id, email, status, tags, attributes, created_at, updated_at)
SELECT gen_random_uuid(), 'acme', 'c' || i || '@example.com', 'subscribed', ARRAY['vip', 'b2b'],
       '{"plan": "pro"}', timestamptz '2026-09-01 00:00:00+00', timestamptz '2026-09-29 12:00:00+00'
FROM generate_series(1, 300) i;
ANALYZE app.email_event;
ANALYZE app.contact;
"""


def _published_sql() -> str:
    section = OPERATORS.read_text().split("## The source contract", 1)[1]
    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", section, re.S) if "seqexport_source" in b][:1]
    return block


def test_the_published_views_serve_the_reader_through_an_index() -> None:
    role = f"seqexport_reader_{secrets.token_hex(4)}"
    sql = _published_sql().replace("seqexport_reader", role)
    try:
        with postgres_database() as url:
            admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(APP_SCHEMA)
                conn.exec_driver_sql(sql)
            admin.dispose()
            engine = sa.create_engine(url.replace("postgres@", f"{role}:change-me@"))
            try:
                _read_through_the_views(engine)
            finally:
                engine.dispose()
    finally:
        with sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')


def _read_through_the_views(engine: sa.Engine) -> None:
    reader = SourceReader(engine)
    window = Window(parse_iso_ms("2026-09-30T01:00:00.000Z"), parse_iso_ms("2026-09-30T02:00:00.000Z"))
    rows = [row for batch in reader.window_batches("email_events", "acme", window) for row in batch]
    fields = DATASETS["email_events"].field_names
    assert len(rows) == 1800 == reader.count_window("email_events", "acme", window)
    assert all(len(row) == len(fields) for row in rows)
    recorded = [row[fields.index("recorded_at")] for row in rows]
    assert all(re.match(TIMESTAMP_PATTERN, t) for t in recorded)
    assert recorded[0] == "2026-09-30T01:00:00.123Z" and recorded == sorted(recorded)
    assert rows[0][fields.index("ip_address")] == "203.0.113.7"
    # A retry continues after a part boundary (recorded_at, id).
    boundary = (recorded[99], rows[99][0])
    rest = [row for batch in reader.window_batches("email_events", "acme", window, after=boundary) for row in batch]
    assert rest == rows[100:]
    assert sum(len(batch) for batch in reader.ids("email_events", "acme", window)) == 1800
    # A reconciliation pass reads several windows' ids in one statement: each the same as `ids`.
    halves = [Window(window.from_ms, window.from_ms + 1_800_000), Window(window.from_ms + 1_800_000, window.to_ms)]
    by_window = reader.ids_of_windows("email_events", "acme", [*halves, window])
    for w in [*halves, window]:
        assert sorted(by_window[w]) == sorted(i for batch in reader.ids("email_events", "acme", w) for i in batch)
    assert len(by_window[halves[0]]) + len(by_window[halves[1]]) == 1800

    subscribers = [row for batch in reader.snapshot_batches("acme") for row in batch]
    names = DATASETS["subscribers"].field_names
    assert len(subscribers) == 300 and [s[0] for s in subscribers] == sorted(s[0] for s in subscribers)
    assert json.loads(subscribers[0][names.index("tags")]) == ["vip", "b2b"]
    assert json.loads(subscribers[0][names.index("attributes")]) == {"plan": "pro"}
    assert subscribers[0][names.index("updated_at")] == "2026-09-29T12:00:00.000Z"

    with engine.connect() as conn:
        plan = "\n".join(
            line
            for (line,) in conn.exec_driver_sql(
                "EXPLAIN SELECT id FROM email_events WHERE account_id = 'acme' AND recorded_at > "
                "'2026-09-30T01:00:00.000Z' AND recorded_at <= '2026-09-30T02:00:00.000Z' ORDER BY recorded_at, id"
            )
        )
        # The role reads the views only, never Sequenzy's own tables.
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
            conn.exec_driver_sql("SELECT 1 FROM app.email_event LIMIT 1")
    assert "email_event_export_idx" in plan and "Sort" not in plan, plan
