"""Source readers on SQLite and the real PostgreSQL server, and the demo data generator."""

from __future__ import annotations

import json
import re
import secrets
import tracemalloc
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, iso_ms, parse_iso_ms
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.source.tables import create_source_tables
from seqexport_dagster.store.database import create_engine
from seqexport_dagster_tests.support.world import DAY0, PG_ADMIN_URL, World

TIE_IDS = ["b", "a_b", "ab", "a-c", "A", "Z9", "a", "é", "e", "a b"]
SMALL = Scale(subscribers=60, email_sends_per_hour=40, sms_sends_per_hour=10, custom_per_hour=20)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_world(request: pytest.FixtureRequest) -> World:
    return request.getfixturevalue("world" if request.param == "sqlite" else "pg_world")


def custom(account: str, row_id: str, recorded_ms: int) -> tuple[Any, ...]:
    return (account, row_id, "page_viewed", iso_ms(recorded_ms - 5), iso_ms(recorded_ms), "sub_1", None, '{"a":1}')


def read_all(reader: SourceReader, dataset: str, account: str, window: Window) -> list[tuple[Any, ...]]:
    return [row for batch in reader.window_batches(dataset, account, window) for row in batch]


def test_window_rows_in_recorded_at_then_id_order(any_world: World) -> None:
    """Ties on recorded_at are broken by id in byte order, the same on SQLite and PostgreSQL."""
    t = DAY0 + 10 * MINUTE_MS
    rows = [custom("acme", i, t) for i in TIE_IDS]
    rows += [custom("acme", f"x{n}", DAY0 + n * MINUTE_MS) for n in range(1, 30)]
    insert_rows(any_world.source_engine, "custom_events", rows)
    got = read_all(any_world.source, "custom_events", "acme", Window(DAY0, DAY0 + HOUR_MS))
    expected = sorted((r[1:] for r in rows), key=lambda r: (r[3].encode(), r[0].encode()))
    assert got == expected
    assert [len(r) for r in got] == [len(DATASETS["custom_events"].fields)] * len(got)


@pytest.fixture
def linguistic_pg() -> Iterator[sa.Engine]:
    """A PostgreSQL source database whose default collation is en-US (ICU), as many production
    servers are set up: byte order must not depend on it."""
    name = f"seqexport_test_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(
            sa.text(
                f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            )
        )
    engine = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}")
    try:
        create_source_tables(engine)
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_order_is_byte_order_under_a_linguistic_default_collation(linguistic_pg: sa.Engine) -> None:
    t = DAY0 + 10 * MINUTE_MS
    insert_rows(linguistic_pg, "custom_events", [custom("acme", i, t) for i in TIE_IDS])
    insert_rows(linguistic_pg, "subscribers", [subscriber("acme", i) for i in TIE_IDS])
    reader = SourceReader(linguistic_pg)
    got = [r[0] for r in read_all(reader, "custom_events", "acme", Window(DAY0, DAY0 + HOUR_MS))]
    assert got == sorted(TIE_IDS, key=str.encode)
    assert [r[0] for b in reader.snapshot_batches("acme") for r in b] == sorted(TIE_IDS, key=str.encode)


def test_window_bounds_exclusive_inclusive_and_account(any_world: World) -> None:
    w = Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)
    rows = [
        custom("acme", "at_from", w.from_ms),
        custom("acme", "just_after_from", w.from_ms + 1),
        custom("acme", "at_to", w.to_ms),
        custom("acme", "just_after_to", w.to_ms + 1),
        custom("other", "other_account", w.from_ms + 10),
    ]
    insert_rows(any_world.source_engine, "custom_events", rows)
    got = [r[0] for r in read_all(any_world.source, "custom_events", "acme", w)]
    assert got == ["just_after_from", "at_to"]
    assert any_world.source.count_window("custom_events", "acme", w) == 2
    earlier = read_all(any_world.source, "custom_events", "acme", Window(DAY0, w.from_ms))
    assert [r[0] for r in earlier] == ["at_from"], "the row at the bound belongs to the window ending there"


def test_window_streams_in_batches(any_world: World) -> None:
    rows = [custom("acme", f"r{n:05d}", DAY0 + 1 + n) for n in range(103)]
    insert_rows(any_world.source_engine, "custom_events", rows)
    reader = SourceReader(any_world.source_engine, batch_size=10)
    batches = reader.window_batches("custom_events", "acme", Window(DAY0, DAY0 + HOUR_MS))
    first = next(batches)
    assert len(first) == 10
    if any_world.source_engine.dialect.name == "postgresql":
        # A server-side cursor: the server has only been asked for one batch so far.
        with any_world.source_engine.connect() as conn:
            queries = conn.execute(
                sa.text(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalars()
            assert any(q.startswith("FETCH FORWARD 10 FROM") for q in queries)
    rest = list(batches)
    assert [len(b) for b in rest] == [10] * 9 + [3]
    assert [r[0] for b in [first, *rest] for r in b] == [r[1] for r in rows]


def test_sqlite_window_read_memory_is_bounded(world: World) -> None:
    n = 25_000
    insert_rows(world.source_engine, "custom_events", (custom("acme", f"r{i:06d}", DAY0 + 1 + i) for i in range(n)))
    tracemalloc.start()
    try:
        count = 0
        reader = SourceReader(world.source_engine, batch_size=1_000)
        for batch in reader.window_batches("custom_events", "acme", Window(DAY0, DAY0 + HOUR_MS)):
            count += len(batch)
            del batch
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 3_000_000, f"peak {peak:,} B reading {n} rows: rows are being buffered"


def subscriber(account: str, sub_id: str) -> tuple[Any, ...]:
    ts = iso_ms(DAY0)
    return (account, sub_id, f"{sub_id}@example.com", None, "A", "B", "subscribed", "[]", "{}", ts, ts, None)


def test_snapshot_ordered_by_id_and_consistent(any_world: World) -> None:
    ids = [f"sub_{n:04d}" for n in range(57)][::-1] + ["Sub_upper", "sub-dash"]
    insert_rows(any_world.source_engine, "subscribers", [subscriber("acme", i) for i in ids])
    insert_rows(any_world.source_engine, "subscribers", [subscriber("other", "sub_x")])
    reader = SourceReader(any_world.source_engine, batch_size=8)
    batches = reader.snapshot_batches("acme")
    first = next(batches)
    # Changes committed while the snapshot is being read are not seen by it.
    with any_world.source_engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM subscribers WHERE id = 'sub_0056'"))
        conn.execute(sa.text("UPDATE subscribers SET first_name = 'CHANGED' WHERE id = 'sub_0050'"))
    insert_rows(any_world.source_engine, "subscribers", [subscriber("acme", "sub_9999")])
    got = first + [r for b in batches for r in b]
    assert [r[0] for r in got] == sorted(ids, key=str.encode)
    assert all(r[3] == "A" for r in got)
    after = [r[0] for b in reader.snapshot_batches("acme") for r in b]
    assert "sub_9999" in after and "sub_0056" not in after


def test_snapshot_read_is_one_repeatable_read_transaction_on_postgres(pg_world: World) -> None:
    insert_rows(pg_world.source_engine, "subscribers", [subscriber("acme", f"s{n:03d}") for n in range(20)])
    batches = SourceReader(pg_world.source_engine, batch_size=5).snapshot_batches("acme")
    next(batches)
    with pg_world.source_engine.connect() as conn:
        levels = conn.execute(
            sa.text(
                "SELECT backend_xid, backend_xmin, state FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'FETCH%'"
            )
        ).all()
    assert len(levels) == 1 and levels[0].state == "idle in transaction"
    assert len([r for b in batches for r in b]) == 15


def dump(engine: sa.Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {
            name: [tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY account_id, id"))]
            for name in DATASETS
        }


def test_generator_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    dumps = []
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        engine = create_engine(f"sqlite:///{tmp_path / name}.db")
        counts = generate_account(engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, seed=seed, scale=SMALL)
        assert counts["subscribers"] == 60 and counts["email_events"] > 3 * 40
        dumps.append(dump(engine))
        engine.dispose()
    assert dumps[0] == dumps[1]
    assert dumps[0] != dumps[2]


@pytest.fixture(scope="module")
def demo_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('gen') / 'source.db'}")
    generate_account(engine, "acme", DAY0, DAY0 + DAY_MS, seed=7)
    with engine.connect() as conn:
        data = {name: [dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM {name}"))] for name in DATASETS}
    engine.dispose()
    return data


def test_generator_email_funnels(demo_rows: dict[str, list[dict[str, Any]]]) -> None:
    by_message: dict[str, dict[str, int]] = defaultdict(dict)
    for e in demo_rows["email_events"]:
        by_message[e["message_id"]].setdefault(e["event_type"], parse_iso_ms(e["occurred_at"]))
    types = {t for m in by_message.values() for t in m}
    assert types == {"sent", "delivered", "opened", "clicked", "bounced", "complained", "unsubscribed"}
    full = 0
    for m in by_message.values():
        assert "sent" in m
        if "opened" in m:
            assert m["sent"] < m["delivered"] < m["opened"]
        if "clicked" in m:
            assert m["opened"] < m["clicked"]
            full += 1
        assert not ("bounced" in m and "delivered" in m)
    assert full >= 20, "sent → delivered → opened → clicked funnels"
    clicks = [e for e in demo_rows["email_events"] if e["event_type"] == "clicked"]
    assert all(e["clicked_url"].startswith("https://") and e["user_agent"] for e in clicks)


def test_generator_delayed_bounces(demo_rows: dict[str, list[dict[str, Any]]]) -> None:
    bounces = [e for e in demo_rows["email_events"] if e["event_type"] == "bounced"]
    assert bounces and all(e["bounce_type"] in ("hard", "soft") and e["bounce_reason"] for e in bounces)
    delays = [parse_iso_ms(e["recorded_at"]) - parse_iso_ms(e["occurred_at"]) for e in bounces]
    assert any(d >= 2 * HOUR_MS for d in delays), "some bounces are recorded hours after they occurred"
    assert any(d < MINUTE_MS for d in delays)


def test_generator_sms_custom_and_subscribers(demo_rows: dict[str, list[dict[str, Any]]]) -> None:
    sms = demo_rows["sms_events"]
    assert {e["event_type"] for e in sms} >= {"sent", "delivered", "failed", "clicked", "replied"}
    assert all(re.fullmatch(r"\+[1-9]\d{6,14}", e["phone"]) for e in sms)
    assert all(e["segments"] >= 1 for e in sms if e["event_type"] == "sent")
    custom_rows = demo_rows["custom_events"]
    assert {e["name"] for e in custom_rows} >= {"order_completed", "page_viewed"}
    props = [json.loads(e["properties"]) for e in custom_rows]
    assert all(isinstance(p, dict) and p for p in props)
    assert any("items" in p and isinstance(p["items"], list) for p in props)
    subs = demo_rows["subscribers"]
    assert len(subs) == Scale().subscribers
    tags = [json.loads(s["tags"]) for s in subs]
    attributes = [json.loads(s["attributes"]) for s in subs]
    assert all(isinstance(t, list) for t in tags) and any(tags)
    assert all(isinstance(a, dict) and "plan" in a for a in attributes)
    assert {s["status"] for s in subs} >= {"subscribed", "unsubscribed"}
    for s in subs:
        assert (s["unsubscribed_at"] is not None) == (s["status"] == "unsubscribed")
    for name in ("email_events", "sms_events", "custom_events"):
        for e in demo_rows[name]:
            assert parse_iso_ms(e["recorded_at"]) >= parse_iso_ms(e["occurred_at"])


#: Text that JSON writers get wrong: quotes, backslashes, short and \u00XX escapes, DEL, the JS line
#: separators, non-BMP characters (surrogate pairs in UTF-16 tools) and long values.
AWKWARD = [
    'say "hi" \\ back\\slash \\u00e9 not an escape',
    "line\nbreak\ttab\rreturn\b\f\x01\x1f\x7f",
    "js separators \u2028 and \u2029, BOM \ufeff",
    "emoji 👋🏽 non-BMP 𝄞 𠜎 \U0010ffff, Zürich, 東京",
    "x" * 1500 + "é👋",
]


def test_awkward_text_is_written_identically_from_sqlite_and_postgresql(world: World, pg_world: World) -> None:
    """Edge-case text, NULLs, integers and nested JSON: the same gzip bytes from both databases; every
    line is one valid JSON object in the contract's field order that decodes to exactly what was stored
    and validates against the published schema. JSON-text fields are re-encoded compactly."""
    import gzip

    import jsonschema
    import msgspec

    from seqexport_dagster.contract.schema_publish import SCHEMA_DIR
    from seqexport_dagster.delivery.writer import PartWriter, one_line_each

    props = [
        {"text": s, "nested": {"list": [s, 1, None, True, 2.5], "ключ": {"🔑": s}}, "n": -(2**53)} for s in AWKWARD
    ]
    stored = [json.dumps(p, ensure_ascii=False) for p in props[:3]]  # with spaces after ":" and ","
    stored += [json.dumps(p, separators=(",", ":")) for p in props[3:]]  # compact and \u-escaped
    stored.append('{"long": "' + "y" * 100_000 + '"}')
    customs = [
        ("acme", f"cev_{i}", name[:255], iso_ms(DAY0 + i), iso_ms(DAY0 + i + 1), None if i % 2 else "sub_1",
         AWKWARD[i % len(AWKWARD)][:255], text)
        for i, (name, text) in enumerate(zip([*AWKWARD, "empty"], stored, strict=True))
    ]  # fmt: skip
    customs.append(("acme", "cev_null", "n", iso_ms(DAY0 + 90), iso_ms(DAY0 + 91), None, None, None))
    sms = [
        ("acme", f"sev_{i}", "replied", iso_ms(DAY0 + i), iso_ms(DAY0 + i + 1), "sub_1", "+14155550123", None,
         None, "msg_1", segments, None, None, text[:1600])
        for i, (segments, text) in enumerate(zip([None, 0, 1, 2**31 - 1, 7], AWKWARD, strict=True))
    ]  # fmt: skip
    window = Window(DAY0, DAY0 + HOUR_MS)
    bodies: dict[str, list[bytes]] = {}
    for w in (world, pg_world):
        insert_rows(w.source_engine, "custom_events", customs)
        insert_rows(w.source_engine, "sms_events", sms)
        for name in ("custom_events", "sms_events"):
            batches = SourceReader(w.source_engine, batch_size=2).window_batches(name, "acme", window)
            body = gzip.decompress(b"".join(p.body for p in PartWriter(DATASETS[name], part_limit=3).parts(batches)))
            bodies.setdefault(name, []).append(body)
    for name, source_rows in (("custom_events", customs), ("sms_events", sms)):
        from_sqlite, from_postgres = bodies[name]
        assert from_sqlite == from_postgres
        lines = from_sqlite.split(b"\n")
        assert lines.pop() == b"" and len(lines) == len(source_rows)  # one physical line per row
        ds = DATASETS[name]
        validator = jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / f"{name}.json").read_text()))
        for line, row in zip(lines, sorted(source_rows, key=lambda r: r[4]), strict=True):
            decoded = json.loads(line)
            assert list(decoded) == list(ds.field_names)
            expected = {
                f.name: json.loads(v) if f.type == "object" and v is not None else v
                for f, v in zip(ds.fields, row[1:], strict=True)
            }
            assert decoded == expected
            assert not list(validator.iter_errors(decoded))
            if name == "custom_events" and row[-1] is not None:
                # Re-serialized as one compact JSON value (issue 39: pasted text could forge a row)
                assert one_line_each(msgspec.json.format(row[-1].encode(), indent=-1)) in line
