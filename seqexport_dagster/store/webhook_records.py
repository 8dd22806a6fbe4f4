"""Webhook event types, delivery statuses and the frozen records of endpoints and deliveries.

Plain values, with no database: the remote CLI turns the HTTP API's answers into them, and must not
import SQLAlchemy to do so (issue 40). The outbox (`outbox`) and the store (`webhooks`) write and
read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

EXPORT_FAILING: Final = "export.failing"
EXPORT_RECOVERED: Final = "export.recovered"
EXPORT_PAUSED: Final = "export.paused"
EXPORT_DELETED: Final = "export.deleted"
DAY_COMPLETE: Final = "dataset.day_complete"
WEBHOOK_TEST: Final = "webhook.test"
#: What an endpoint may subscribe to (the test event goes to the endpoint tested, whatever it takes).
EVENT_TYPES: Final = (EXPORT_FAILING, EXPORT_RECOVERED, EXPORT_PAUSED, EXPORT_DELETED, DAY_COMPLETE)
#: ``export.failing`` is sent when a dataset's consecutive failures reach an endpoint's
#: ``failing_after`` (1 to `MAX_FAILING_AFTER`); this is its default.
FAILING_AFTER: Final = 3
MAX_FAILING_AFTER: Final = 100
PENDING, DELIVERED, FAILED, CANCELED = "pending", "delivered", "failed", "canceled"
#: Past the account's pending cap (`store.outbox.MAX_PENDING_PER_ACCOUNT`): recorded, never sent.
DROPPED: Final = "dropped"


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    id: str
    account_id: str
    url: str
    events: tuple[str, ...]  # ("*",): every type
    description: str
    created_at: int
    deleted_at: int | None
    #: export.failing when a dataset's consecutive failures reach this count (default 3).
    failing_after: int = FAILING_AFTER
    #: The circuit breaker: failed attempts in a row, and when and why it disabled the endpoint.
    consecutive_failures: int = 0
    disabled_at: int | None = None
    disabled_reason: str | None = None

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None


@dataclass(frozen=True, slots=True)
class NewEndpoint:
    """An endpoint just added, with its secret: the only time the secret is shown."""

    endpoint: WebhookEndpoint
    secret: str


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    attempt: int
    attempted_at: int
    status_code: int | None
    error: str | None
    duration_ms: int


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: int
    event_id: str
    event_type: str
    endpoint_id: str
    account_id: str
    status: str
    attempts: int
    next_attempt_at: int | None
    created_at: int
    finished_at: int | None
    log: tuple[AttemptRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """What the dispatcher needs to send one delivery: the body as recorded, never re-rendered."""

    id: int
    event_id: str
    event_type: str
    endpoint_id: str
    attempts: int
    next_attempt_at: int
    body: str
    account_id: str = ""
