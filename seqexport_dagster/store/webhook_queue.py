"""The dispatcher's side of the webhook tables: which deliveries are due, in what order, the
endpoints' circuit breaker (issue 41; `store.webhooks.WebhookStore` calls these), and retention.

Fairness is in the query: `due_deliveries` ranks due rows within each account and within each
endpoint (window functions, on SQLite and PostgreSQL alike) and returns them turn by turn, so an
account with thousands due never pushes another account's one fresh delivery out of a batch.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.tables import webhook_attempts, webhook_deliveries, webhook_endpoints, webhook_events
from seqexport_dagster.store.webhook_records import PENDING, DueDelivery

MAX_REASON_CHARS: Final = 500
#: Webhook events, deliveries and their attempts are kept this long (`prune`, `seqexport maintain`).
WEBHOOK_RETENTION_MS: Final = 30 * DAY_MS


@translate_errors
def due_deliveries(engine: sa.Engine, now_ms: int, limit: int, *, per_endpoint: int | None = None) -> list[DueDelivery]:
    """Up to ``limit`` due deliveries of enabled endpoints, in turns across accounts: every
    account's oldest first (oldest account first), then every account's second, and so on, so
    one account's backlog never pushes another's fresh delivery out of the batch. At most
    ``per_endpoint`` (default ``limit``) of one endpoint. Reads only the due rows (index
    ``ix_webhook_deliveries_due``), which the per-account pending cap bounds."""
    d, ev, e = webhook_deliveries.c, webhook_events.c, webhook_endpoints.c
    by_time = (d.next_attempt_at, d.id)
    ranked = (
        sa.select(
            d.id,
            d.event_id,
            d.endpoint_id,
            d.attempts,
            d.next_attempt_at,
            d.account_id,
            sa.func.row_number().over(partition_by=d.account_id, order_by=by_time).label("turn"),
            sa.func.row_number().over(partition_by=d.endpoint_id, order_by=by_time).label("place"),
        )
        .select_from(webhook_deliveries.join(webhook_endpoints, e.id == d.endpoint_id))
        .where(d.status == PENDING, d.next_attempt_at <= now_ms, e.disabled_at.is_(None))
        .subquery()
    )
    r = ranked.c
    query = (
        sa.select(r.id, r.event_id, ev.type, r.endpoint_id, r.attempts, r.next_attempt_at, ev.body, r.account_id)
        .select_from(ranked.join(webhook_events, ev.id == r.event_id))
        .where(r.place <= (per_endpoint or limit))
        .order_by(r.turn, r.next_attempt_at, r.id)
        .limit(limit)
    )
    with engine.connect() as conn:
        return [DueDelivery(*row) for row in conn.execute(query).all()]


def count_for_breaker(
    conn: sa.Connection,
    endpoint_id: str,
    delivered: bool,
    breaker_after: int | None,
    now_ms: int,
    error: str | None,
    status_code: int | None,
) -> bool:
    e = webhook_endpoints.c
    if delivered:
        conn.execute(webhook_endpoints.update().where(e.id == endpoint_id).values(consecutive_failures=0))
        return False
    conn.execute(
        webhook_endpoints.update().where(e.id == endpoint_id).values(consecutive_failures=e.consecutive_failures + 1)
    )
    if breaker_after is None:
        return False
    last = f"HTTP {status_code}" if status_code is not None else (error or "no answer")
    reason = f"disabled after {breaker_after} failed attempts in a row (the last: {last})"[:MAX_REASON_CHARS]
    disabled = conn.execute(
        webhook_endpoints.update()
        .where(e.id == endpoint_id, e.disabled_at.is_(None), e.consecutive_failures >= breaker_after)
        .values(disabled_at=now_ms, disabled_reason=reason)
    ).rowcount
    return bool(disabled)


@translate_errors
def prune_webhook_events(engine: sa.Engine, now_ms: int) -> int:
    """Events older than the retention whose deliveries are all finished go, with their
    deliveries and attempts; a delivery still pending keeps its event. Returns events removed."""
    cutoff = now_ms - WEBHOOK_RETENTION_MS
    d, ev, a = webhook_deliveries.c, webhook_events.c, webhook_attempts.c
    pending = sa.select(d.id).where(d.event_id == ev.id, d.status == PENDING).exists()
    with engine.begin() as conn:
        old = [r[0] for r in conn.execute(sa.select(ev.id).where(ev.created_at < cutoff, sa.not_(pending)))]
        removed = 0
        for start in range(0, len(old), 500):
            chunk = old[start : start + 500]
            ids = sa.select(d.id).where(d.event_id.in_(chunk))
            conn.execute(webhook_attempts.delete().where(a.delivery_id.in_(ids)))
            conn.execute(webhook_deliveries.delete().where(d.event_id.in_(chunk)))
            removed += int(conn.execute(webhook_events.delete().where(ev.id.in_(chunk))).rowcount or 0)
    return removed
