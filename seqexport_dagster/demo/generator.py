"""Deterministic, seeded demo data that looks like a real Sequenzy account.

Email funnels (sent → delivered → opened → clicked), bounces and complaints (some bounces recorded
hours after they occurred: the delayed bounce of the customer docs), unsubscribes, SMS events,
custom events with properties, and subscribers with tags and attributes. The same seed always gives
the same rows, so tests can compare an export with its source exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, iso_ms
from seqexport_dagster.source.tables import create_source_tables

Row = tuple[Any, ...]

_FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Ken",
    "Linus",
    "Margaret",
    "Radia",
    "Frances",
    "José",
    "Zoë",
]
_LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Thompson",
    "Hamilton",
    "Perlman",
    "Allen",
    "Núñez",
]
_TAGS = ["vip", "newsletter", "trial", "customer", "churn-risk", "beta", "eu", "us"]
_SUBJECTS = [
    "Your weekly digest",
    "Last chance: 20% off ends tonight",
    "Welcome aboard 👋",
    'New: "smart segments" are here',
    "Your invoice is ready",
]
_AGENTS = [
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko)",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36",
]
_BOUNCES = [
    ("hard", "550 5.1.1 The email account that you tried to reach does not exist"),
    ("soft", "452 4.2.2 The email account that you tried to reach is over quota"),
    ("soft", "421 4.7.0 Try again later, closing connection"),
]
_CUSTOM = ["order_completed", "trial_started", "page_viewed", "cart_abandoned"]


@dataclass(frozen=True, slots=True)
class Scale:
    subscribers: int = 300
    email_sends_per_hour: int = 60
    sms_sends_per_hour: int = 12
    custom_per_hour: int = 30


class _Ids:
    def __init__(self, account_id: str) -> None:
        self.prefix = account_id
        self.n = 0

    def __call__(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.prefix}_{self.n:09d}"


def subscribers(rng: random.Random, account_id: str, count: int, start_ms: int) -> list[Row]:
    rows = []
    for i in range(count):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        created = start_ms - rng.randrange(1, 400) * 24 * HOUR_MS + rng.randrange(HOUR_MS * 24)
        status = rng.choices(["subscribed", "unsubscribed", "bounced", "complained"], [90, 6, 3, 1])[0]
        unsub = created + rng.randrange(HOUR_MS, 30 * 24 * HOUR_MS) if status == "unsubscribed" else None
        if unsub is not None and unsub >= start_ms:
            # Never the future: a snapshot of any day from start_ms on shows a change that already happened.
            unsub = created + (start_ms - created) // 2
        tags = json.dumps(sorted(rng.sample(_TAGS, rng.randrange(0, 4))))
        attributes = json.dumps(
            {
                "plan": rng.choice(["free", "pro", "team"]),
                "ltv": round(rng.uniform(0, 900), 2),
                "city": "Zürich",
            },
            ensure_ascii=False,
        )
        phone = f"+1415555{i % 10000:04d}" if rng.random() < 0.6 else None
        rows.append(
            (
                account_id,
                f"sub_{account_id}_{i:07d}",
                f"{first.lower()}.{last.lower()}{i}@example.com",
                phone,
                first,
                last,
                status,
                tags,
                attributes,
                iso_ms(created),
                iso_ms(max(created, unsub or created)),
                iso_ms(unsub) if unsub else None,
            )
        )
    return rows


def email_events(
    rng: random.Random, account_id: str, subs: list[Row], start_ms: int, end_ms: int, sends: int
) -> Iterator[Row]:
    """``sends`` messages spread over the range, each with its funnel of events."""
    ids = _Ids(account_id)
    for _ in range(sends):
        sub = rng.choice(subs)
        sub_id, email = sub[1], sub[2]
        sent = rng.randrange(start_ms, end_ms)
        campaign = f"cmp_{rng.randrange(1, 6)}" if rng.random() < 0.7 else None
        sequence = None if campaign else f"seq_{rng.randrange(1, 4)}"
        message = ids("msg")
        subject = rng.choice(_SUBJECTS)

        def event(kind: str, occurred: int, recorded: int | None = None, **extra: Any) -> Row:
            rec = recorded if recorded is not None else occurred + rng.randrange(5, 3_000)
            return (
                account_id, ids("eev"), kind, iso_ms(occurred), iso_ms(rec), sub_id, email, campaign, sequence, message,
                subject, extra.get("url"), extra.get("bounce_type"), extra.get("reason"),
                extra.get("agent"), extra.get("ip"),
            )  # fmt: skip

        yield event("sent", sent)
        roll = rng.random()
        if roll < 0.03:
            bounce_type, reason = rng.choice(_BOUNCES)
            occurred = sent + rng.randrange(1_000, 60_000)
            # Some bounces are reported hours after they happened: they land in a later window.
            delayed = rng.random() < 0.5
            recorded = occurred + (rng.randrange(2 * HOUR_MS, 6 * HOUR_MS) if delayed else rng.randrange(5, 3_000))
            yield event("bounced", occurred, recorded, bounce_type=bounce_type, reason=reason)
            continue
        delivered = sent + rng.randrange(500, 30_000)
        yield event("delivered", delivered)
        if rng.random() < 0.45:
            opened = delivered + rng.randrange(MINUTE_MS, 8 * HOUR_MS)
            agent, ip = rng.choice(_AGENTS), f"203.0.113.{rng.randrange(1, 255)}"
            yield event("opened", opened, agent=agent, ip=ip)
            if rng.random() < 0.3:
                url = f"https://shop.example.com/p/{rng.randrange(1, 500)}?utm_source=sequenzy&utm_campaign={campaign}"
                yield event("clicked", opened + rng.randrange(2_000, 600_000), url=url, agent=agent, ip=ip)
            if rng.random() < 0.02:
                yield event("unsubscribed", opened + rng.randrange(5_000, 900_000))
        if rng.random() < 0.004:
            yield event("complained", delivered + rng.randrange(HOUR_MS, 3 * HOUR_MS))


def sms_events(
    rng: random.Random, account_id: str, subs: list[Row], start_ms: int, end_ms: int, sends: int
) -> Iterator[Row]:
    ids = _Ids(account_id)
    with_phone = [s for s in subs if s[3]] or subs
    for _ in range(sends):
        sub = rng.choice(with_phone)
        sent = rng.randrange(start_ms, end_ms)
        campaign = f"cmp_sms_{rng.randrange(1, 3)}"
        message = ids("sms")
        phone = sub[3] or "+14155550000"

        def event(kind: str, occurred: int, **extra: Any) -> Row:
            return (
                account_id, ids("sev"), kind, iso_ms(occurred), iso_ms(occurred + rng.randrange(5, 4_000)), sub[1], phone,
                campaign, None, message, extra.get("segments"), extra.get("error"), extra.get("url"),
                extra.get("reply"),
            )  # fmt: skip

        yield event("sent", sent, segments=rng.choice([1, 1, 1, 2, 3]))
        if rng.random() < 0.04:
            yield event("failed", sent + rng.randrange(1_000, 60_000), error=rng.choice(["30003", "30005", "30007"]))
            continue
        delivered = sent + rng.randrange(1_000, 20_000)
        yield event("delivered", delivered)
        roll = rng.random()
        if roll < 0.15:
            yield event("clicked", delivered + rng.randrange(MINUTE_MS, HOUR_MS), url="https://shop.example.com/s/1")
        elif roll < 0.2:
            yield event("replied", delivered + rng.randrange(MINUTE_MS, HOUR_MS), reply=rng.choice(["Yes!", "STOP"]))
        elif roll < 0.22:
            yield event("opted_out", delivered + rng.randrange(MINUTE_MS, HOUR_MS))


def custom_events(
    rng: random.Random, account_id: str, subs: list[Row], start_ms: int, end_ms: int, count: int
) -> Iterator[Row]:
    ids = _Ids(account_id)
    for _ in range(count):
        sub = rng.choice(subs)
        name = rng.choice(_CUSTOM)
        occurred = rng.randrange(start_ms, end_ms)
        properties: dict[str, Any] = {"source": rng.choice(["web", "ios", "android"])}
        if name == "order_completed":
            properties |= {"order_id": f"ord_{rng.randrange(10**6)}", "total": round(rng.uniform(5, 500), 2),
                           "items": [{"sku": f"SKU-{rng.randrange(100)}", "qty": rng.randrange(1, 4)}]}  # fmt: skip
        elif name == "page_viewed":
            properties["path"] = f"/products/{rng.randrange(1, 500)}"
        yield (account_id, ids("cev"), name, iso_ms(occurred), iso_ms(occurred + rng.randrange(5, 2_000)), sub[1], sub[2],
               json.dumps(properties, separators=(",", ":")))  # fmt: skip


def generate_account(
    engine: sa.Engine,
    account_id: str,
    start_ms: int,
    end_ms: int,
    *,
    seed: int = 7,
    scale: Scale | None = None,
) -> dict[str, int]:
    """Fill the source with one account's data for ``[start_ms, end_ms)``; returns rows per table.

    Rows whose recorded time falls after ``end_ms`` (late events) are kept: they are the future
    windows' content, exactly as in production.
    """
    scale = scale or Scale()
    rng = random.Random(f"{seed}:{account_id}")
    hours = max(1, (end_ms - start_ms) // HOUR_MS)
    subs = subscribers(rng, account_id, scale.subscribers, start_ms)
    data: dict[str, list[Row]] = {
        "subscribers": subs,
        "email_events": list(email_events(rng, account_id, subs, start_ms, end_ms, scale.email_sends_per_hour * hours)),
        "sms_events": list(sms_events(rng, account_id, subs, start_ms, end_ms, scale.sms_sends_per_hour * hours)),
        "custom_events": list(custom_events(rng, account_id, subs, start_ms, end_ms, scale.custom_per_hour * hours)),
    }
    create_source_tables(engine)
    for name, rows in data.items():
        insert_rows(engine, name, rows)
    return {name: len(rows) for name, rows in data.items()}


def insert_rows(engine: sa.Engine, table: str, rows: list[Row] | Iterator[Row], batch: int = 20_000) -> int:
    """Bulk insert through the DBAPI (SQLAlchemy's executemany is 10× slower for millions of rows)."""
    columns = ["account_id", *DATASETS[table].field_names]
    total = 0
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        buffer: list[Row] = []

        def flush() -> None:
            if not buffer:
                return
            if engine.dialect.name == "postgresql":
                from psycopg2.extras import execute_values

                execute_values(cur, f"INSERT INTO {table} ({', '.join(columns)}) VALUES %s", buffer, page_size=2000)
            else:
                marks = ", ".join("?" for _ in columns)
                cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", buffer)
            buffer.clear()

        for row in rows:
            buffer.append(row)
            total += 1
            if len(buffer) >= batch:
                flush()
        flush()
        raw.commit()
    finally:
        raw.close()
    return total
