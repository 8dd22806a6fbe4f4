"""Webhook endpoints, deliveries and the delivery log in the control plane (issue 26).

An endpoint's signing secret is sealed with the credential keys (`SecretBox`), bound to the
endpoint's id, URL and account, as a bucket secret is bound to its export and destination: copied
onto another row it does not open. It is returned in clear once, by `WebhookStore.add_endpoint`,
and opened again only in memory by the dispatcher (`endpoint_secret`).

The dispatcher's work is bounded: `due_deliveries` reads at most ``limit`` due deliveries, in turns
across accounts (`store.webhook_queue`); `claim` pushes a delivery's next attempt out before it is
sent, so a second dispatcher running at the same moment skips it. `record_attempt` keeps the
endpoint's circuit breaker (`enable_endpoint` undoes it).
"""

from __future__ import annotations

import secrets
from typing import Final

import sqlalchemy as sa

from seqexport_dagster.errors import NotFound, SecretKeyError
from seqexport_dagster.store.crypto import SealBinding, SecretBox
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.outbox import emit, pending_count
from seqexport_dagster.store.records import RotationReport
from seqexport_dagster.store.tables import webhook_attempts, webhook_deliveries, webhook_endpoints, webhook_events
from seqexport_dagster.store.webhook_queue import count_for_breaker, due_deliveries
from seqexport_dagster.store.webhook_records import (
    CANCELED,
    DELIVERED,
    FAILED,
    FAILING_AFTER,
    PENDING,
    WEBHOOK_TEST,
    AttemptRecord,
    DeliveryRecord,
    DueDelivery,
    NewEndpoint,
    WebhookEndpoint,
)

MAX_ERROR_CHARS: Final = 500


def new_endpoint_id() -> str:
    return f"whk_{secrets.token_hex(8)}"


def new_secret() -> str:
    return f"whsec_{secrets.token_urlsafe(32)}"


def endpoint_binding(endpoint_id: str, url: str, account_id: str) -> SealBinding:
    """Bound like a bucket secret: the secret only ever signs for this endpoint, URL and account."""
    return SealBinding(endpoint_id, "webhook", url, account_id, None)


def _endpoint_of(r: sa.Row[tuple[object, ...]] | sa.RowMapping) -> WebhookEndpoint:
    m = r._mapping if isinstance(r, sa.Row) else r
    return WebhookEndpoint(
        id=m["id"],
        account_id=m["account_id"],
        url=m["url"],
        events=tuple(str(m["events"]).split(",")),
        description=m["description"],
        created_at=m["created_at"],
        deleted_at=m["deleted_at"],
        failing_after=int(m["failing_after"]),
        consecutive_failures=int(m["consecutive_failures"]),
        disabled_at=m["disabled_at"],
        disabled_reason=m["disabled_reason"],
    )


class WebhookStore:
    def __init__(self, engine: sa.Engine, box: SecretBox) -> None:
        self.engine = engine
        self.box = box

    @translate_errors
    def add_endpoint(
        self,
        *,
        account_id: str,
        url: str,
        events: tuple[str, ...],
        description: str,
        now_ms: int,
        failing_after: int = FAILING_AFTER,
    ) -> NewEndpoint:
        endpoint_id = new_endpoint_id()
        secret = new_secret()
        sealed = self.box.encrypt(secret, endpoint_binding(endpoint_id, url, account_id))
        with self.engine.begin() as conn:
            conn.execute(
                webhook_endpoints.insert().values(
                    id=endpoint_id,
                    account_id=account_id,
                    url=url,
                    events=",".join(events),
                    description=description,
                    failing_after=failing_after,
                    secret_ciphertext=sealed,
                    created_at=now_ms,
                )
            )
        return NewEndpoint(self.get_endpoint(endpoint_id), secret)

    @translate_errors
    def get_endpoint(self, endpoint_id: str, *, include_deleted: bool = False) -> WebhookEndpoint:
        e = webhook_endpoints.c
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(webhook_endpoints).where(e.id == endpoint_id)).first()
        if r is None or (r.deleted_at is not None and not include_deleted):
            raise NotFound(f"webhook {endpoint_id!r} not found")
        return _endpoint_of(r)

    @translate_errors
    def list_endpoints(self, account_id: str | None) -> list[WebhookEndpoint]:
        e = webhook_endpoints.c
        query = sa.select(webhook_endpoints).where(e.deleted_at.is_(None)).order_by(e.created_at, e.id)
        if account_id is not None:
            query = query.where(e.account_id == account_id)
        with self.engine.connect() as conn:
            return [_endpoint_of(r) for r in conn.execute(query).all()]

    @translate_errors
    def remove_endpoint(self, endpoint_id: str, now_ms: int) -> WebhookEndpoint:
        """Stop sending to it: its pending deliveries are canceled; its delivery log stays readable."""
        self.get_endpoint(endpoint_id)
        with self.engine.begin() as conn:
            conn.execute(
                webhook_endpoints.update()
                .where(webhook_endpoints.c.id == endpoint_id, webhook_endpoints.c.deleted_at.is_(None))
                .values(deleted_at=now_ms)
            )
            d = webhook_deliveries.c
            conn.execute(
                webhook_deliveries.update()
                .where(d.endpoint_id == endpoint_id, d.status == PENDING)
                .values(status=CANCELED, finished_at=now_ms)
            )
        return self.get_endpoint(endpoint_id, include_deleted=True)

    @translate_errors
    def endpoint_secret(self, endpoint: WebhookEndpoint) -> str:
        """The signing secret, decrypted in memory only (the dispatcher signs with it)."""
        with self.engine.connect() as conn:
            sealed = conn.execute(
                sa.select(webhook_endpoints.c.secret_ciphertext).where(webhook_endpoints.c.id == endpoint.id)
            ).scalar_one()
        return self.box.decrypt(sealed, endpoint_binding(endpoint.id, endpoint.url, endpoint.account_id))

    @translate_errors
    def rotate_secrets(self, report: RotationReport) -> RotationReport:
        """Re-seal every endpoint's secret with the primary key (``seqexport rotate-keys``), into
        ``report``: after it the old key may be dropped without losing a webhook."""
        e = webhook_endpoints.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(e.id, e.account_id, e.url, e.secret_ciphertext)).all()
        for r in rows:
            if not self.box.needs_rotation(r.secret_ciphertext):
                continue
            try:
                sealed = self.box.reseal(r.secret_ciphertext, endpoint_binding(r.id, r.url, r.account_id))
            except SecretKeyError as exc:
                report.failed.append((r.id, exc.message))
                continue
            with self.engine.begin() as conn:
                conn.execute(
                    webhook_endpoints.update()
                    .where(e.id == r.id, e.secret_ciphertext == r.secret_ciphertext)
                    .values(secret_ciphertext=sealed)
                )
            report.resealed += 1
        return report

    @translate_errors
    def rotate_endpoint_secret(self, endpoint_id: str) -> NewEndpoint:
        """A new signing secret for the endpoint, returned in clear this once; every send from now
        on is signed with it (pending deliveries too: a delivery is signed when it is sent)."""
        endpoint = self.get_endpoint(endpoint_id)
        secret = new_secret()
        sealed = self.box.encrypt(secret, endpoint_binding(endpoint.id, endpoint.url, endpoint.account_id))
        with self.engine.begin() as conn:
            conn.execute(
                webhook_endpoints.update()
                .where(webhook_endpoints.c.id == endpoint.id, webhook_endpoints.c.deleted_at.is_(None))
                .values(secret_ciphertext=sealed)
            )
        return NewEndpoint(self.get_endpoint(endpoint.id), secret)

    @translate_errors
    def enable_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """Undo the circuit breaker: the failure count starts again from 0, and the deliveries that
        waited are due at their next attempt time (already past: the next dispatch sends them)."""
        self.get_endpoint(endpoint_id)
        with self.engine.begin() as conn:
            conn.execute(
                webhook_endpoints.update()
                .where(webhook_endpoints.c.id == endpoint_id)
                .values(consecutive_failures=0, disabled_at=None, disabled_reason=None)
            )
        return self.get_endpoint(endpoint_id)

    @translate_errors
    def pending(self, account_id: str) -> int:
        with self.engine.connect() as conn:
            return pending_count(conn, account_id)

    @translate_errors
    def enqueue_test(self, endpoint: WebhookEndpoint, now_ms: int) -> int:
        """A ``webhook.test`` event for this endpoint alone; returns its delivery's id."""
        with self.engine.begin() as conn:
            event_id = emit(
                conn,
                account_id=endpoint.account_id,
                kind=WEBHOOK_TEST,
                data={"webhook_id": endpoint.id, "message": "test event from Sequenzy Data Exports"},
                now_ms=now_ms,
                endpoint_id=endpoint.id,
            )
            d = webhook_deliveries.c
            return int(conn.execute(sa.select(d.id).where(d.event_id == event_id)).scalar_one())

    @translate_errors
    def due_deliveries(self, now_ms: int, limit: int, *, per_endpoint: int | None = None) -> list[DueDelivery]:
        return due_deliveries(self.engine, now_ms, limit, per_endpoint=per_endpoint)

    @translate_errors
    def claim(self, delivery: DueDelivery, until_ms: int) -> bool:
        """Take the delivery for one attempt (next attempt pushed to ``until_ms`` meanwhile); False if
        another dispatcher took it first. A dispatcher that dies mid-send leaves it due at ``until_ms``."""
        d = webhook_deliveries.c
        with self.engine.begin() as conn:
            taken = conn.execute(
                webhook_deliveries.update()
                .where(d.id == delivery.id, d.status == PENDING, d.next_attempt_at == delivery.next_attempt_at)
                .values(next_attempt_at=until_ms)
            ).rowcount
        return bool(taken)

    @translate_errors
    def cancel(self, delivery: DueDelivery, now_ms: int) -> None:
        """The endpoint was removed after the event: nothing is sent."""
        with self.engine.begin() as conn:
            conn.execute(
                webhook_deliveries.update()
                .where(webhook_deliveries.c.id == delivery.id, webhook_deliveries.c.status == PENDING)
                .values(status=CANCELED, finished_at=now_ms)
            )

    @translate_errors
    def record_attempt(
        self,
        delivery: DueDelivery,
        *,
        now_ms: int,
        status_code: int | None,
        error: str | None,
        duration_ms: int,
        delivered: bool,
        next_attempt_at: int | None,
        breaker_after: int | None = None,
    ) -> bool:
        """One line of the delivery log, the delivery's new state and the endpoint's circuit breaker,
        in one transaction. ``next_attempt_at`` None and not delivered: no more attempts (failed).
        True when this attempt disabled the endpoint (its ``breaker_after``-th failure in a row)."""
        attempt = delivery.attempts + 1
        if delivered:
            values: dict[str, object] = {"status": DELIVERED, "finished_at": now_ms}
        elif next_attempt_at is None:
            values = {"status": FAILED, "finished_at": now_ms}
        else:
            values = {"next_attempt_at": next_attempt_at}
        with self.engine.begin() as conn:
            conn.execute(
                webhook_attempts.insert().values(
                    delivery_id=delivery.id,
                    attempt=attempt,
                    attempted_at=now_ms,
                    status_code=status_code,
                    error=None if error is None else error[:MAX_ERROR_CHARS],
                    duration_ms=duration_ms,
                )
            )
            conn.execute(
                webhook_deliveries.update()
                .where(webhook_deliveries.c.id == delivery.id)
                .values(attempts=attempt, **values)
            )
            return count_for_breaker(conn, delivery.endpoint_id, delivered, breaker_after, now_ms, error, status_code)

    @translate_errors
    def deliveries(self, endpoint_id: str, *, limit: int = 50, delivery_id: int | None = None) -> list[DeliveryRecord]:
        """The endpoint's newest deliveries with their attempts: the delivery log."""
        d, ev, a = webhook_deliveries.c, webhook_events.c, webhook_attempts.c
        query = (
            sa.select(
                d.id,
                d.event_id,
                ev.type,
                d.endpoint_id,
                d.account_id,
                d.status,
                d.attempts,
                d.next_attempt_at,
                d.created_at,
                d.finished_at,
            )
            .select_from(webhook_deliveries.join(webhook_events, ev.id == d.event_id))
            .where(d.endpoint_id == endpoint_id)
            .order_by(d.id.desc())
            .limit(limit)
        )
        if delivery_id is not None:
            query = query.where(d.id == delivery_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            logs: dict[int, list[AttemptRecord]] = {r.id: [] for r in rows}
            if rows:
                for x in conn.execute(
                    sa.select(webhook_attempts).where(a.delivery_id.in_(list(logs))).order_by(a.delivery_id, a.attempt)
                ):
                    logs[x.delivery_id].append(
                        AttemptRecord(x.attempt, x.attempted_at, x.status_code, x.error, x.duration_ms)
                    )
        return [
            DeliveryRecord(
                id=r.id,
                event_id=r.event_id,
                event_type=r.type,
                endpoint_id=r.endpoint_id,
                account_id=r.account_id,
                status=r.status,
                attempts=r.attempts,
                next_attempt_at=r.next_attempt_at if r.status == PENDING else None,
                created_at=r.created_at,
                finished_at=r.finished_at,
                log=tuple(logs[r.id]),
            )
            for r in rows
        ]
