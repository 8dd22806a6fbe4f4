"""The webhook outbox: an event is recorded in the transaction of the state change it reports.

`emit` runs inside the caller's transaction (a window's commit, a failure, a pause or delete), so an
event exists exactly when its change does: a process that dies after the commit still has the
event, and one that dies before has neither. The event is fanned out in the same transaction, one
pending delivery per endpoint of the account that takes its type; the dispatcher
(`seqexport_dagster.delivery.webhook_dispatch`) sends them later, at least once.

One account's deliveries waiting to be sent are capped (`MAX_PENDING_PER_ACCOUNT`, issue 41): a
receiver that never answers, or an endpoint disabled by its circuit breaker, cannot grow the outbox
without bound. Past the cap a new delivery is recorded as ``dropped`` (never sent, visible in the
delivery log); the event itself is kept, and the state it reports is in the CLI and the API anyway.

An event that must happen once (a dataset-day completing) carries a ``dedup_key``; a second emit
with the same key is dropped (a dataset removed and added again the same day reaches that day's end
twice).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.store.tables import webhook_deliveries, webhook_endpoints, webhook_events
from seqexport_dagster.store.webhook_records import DROPPED, PENDING

#: Deliveries one account may have waiting (all its endpoints together).
MAX_PENDING_PER_ACCOUNT: Final = 1000


def pending_count(conn: sa.Connection, account_id: str) -> int:
    d = webhook_deliveries.c
    query = sa.select(sa.func.count()).where(d.account_id == account_id, d.status == PENDING)
    return int(conn.execute(query).scalar_one())


def new_event_id() -> str:
    return f"evt_{secrets.token_hex(12)}"


def event_body(event_id: str, account_id: str, kind: str, created_at: int, data: dict[str, Any]) -> str:
    """The exact bytes every attempt sends (the signature covers them): fixed when the event is made."""
    envelope = {"id": event_id, "type": kind, "created_at": iso_ms(created_at), "account_id": account_id, "data": data}
    return json.dumps(envelope, separators=(",", ":"), sort_keys=False)


def subscribes(events: str, kind: str) -> bool:
    return events == "*" or kind in events.split(",")


def emit(
    conn: sa.Connection,
    *,
    account_id: str,
    kind: str,
    data: dict[str, Any],
    now_ms: int,
    export_id: str | None = None,
    dedup_key: str | None = None,
    endpoint_id: str | None = None,
    wants: Callable[[int], bool] | None = None,
) -> str | None:
    """Record one event and its deliveries in ``conn``'s transaction; the event id, or None when
    ``dedup_key`` was already used, or when ``wants`` (given an endpoint's ``failing_after``) leaves
    no endpoint to send it to. ``endpoint_id``: only that endpoint (a test send)."""
    if dedup_key is not None:
        seen = conn.execute(sa.select(webhook_events.c.id).where(webhook_events.c.dedup_key == dedup_key)).first()
        if seen is not None:
            return None
    e = webhook_endpoints.c
    query = sa.select(e.id, e.events, e.failing_after).where(e.account_id == account_id, e.deleted_at.is_(None))
    if endpoint_id is not None:
        query = query.where(e.id == endpoint_id)
    targets = [
        endpoint.id
        for endpoint in conn.execute(query).all()
        if endpoint_id is not None
        or (subscribes(endpoint.events, kind) and (wants is None or wants(int(endpoint.failing_after))))
    ]
    if wants is not None and not targets:
        return None
    event_id = new_event_id()
    conn.execute(
        webhook_events.insert().values(
            id=event_id,
            account_id=account_id,
            type=kind,
            export_id=export_id,
            dedup_key=dedup_key,
            body=event_body(event_id, account_id, kind, now_ms, data),
            created_at=now_ms,
        )
    )
    waiting = pending_count(conn, account_id) if targets else 0
    for target in targets:
        dropped = waiting >= MAX_PENDING_PER_ACCOUNT
        waiting += 0 if dropped else 1
        conn.execute(
            webhook_deliveries.insert().values(
                event_id=event_id,
                endpoint_id=target,
                account_id=account_id,
                status=DROPPED if dropped else PENDING,
                attempts=0,
                next_attempt_at=now_ms,
                created_at=now_ms,
                finished_at=now_ms if dropped else None,
            )
        )
    return event_id
