"""Managing an account's webhooks: add (the secret is shown once), list, remove, test-send, enable
(after the circuit breaker), rotate the secret and the delivery log. The CLI, the HTTP API (through
`tenancy.ScopedWebhooks`) and tests call this one class.

Every method checks its input first (`webhook`: URL, events, description) and raises only from our
error tree: `InvalidInput` naming the field, `NotFound` for an id that is not there, `ConflictError`
past `MAX_ENDPOINTS_PER_ACCOUNT` or for a disabled endpoint's test, `RateLimited` past an account's
adds or tests (`store.rate_limit`) or its pending deliveries (`outbox.MAX_PENDING_PER_ACCOUNT`).

A test send is queued, never sent here: it goes out with the next dispatch (the sensor's tick,
within 30 s), so an account pointing tests at a receiver that never answers holds no request
thread, and its tests wait their turn behind other accounts' deliveries like any event.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.validation import validate_account
from seqexport_dagster.delivery.webhook import (
    MAX_ENDPOINTS_PER_ACCOUNT,
    parse_events,
    validate_description,
    validate_failing_after,
    validate_url,
    validate_webhook_id,
)
from seqexport_dagster.delivery.webhook_dispatch import DispatchReport, Sender, dispatch, pinned_sender
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ConflictError, InvalidInput, RateLimited
from seqexport_dagster.store.crypto import SecretBox
from seqexport_dagster.store.outbox import MAX_PENDING_PER_ACCOUNT
from seqexport_dagster.store.rate_limit import WEBHOOK_ADD, WEBHOOK_TEST, admit
from seqexport_dagster.store.webhook_records import DeliveryRecord, NewEndpoint, WebhookEndpoint
from seqexport_dagster.store.webhooks import WebhookStore

MAX_DELIVERIES_SHOWN: Final = 200


@dataclass(frozen=True, slots=True)
class TestResult:
    delivery: DeliveryRecord


class Webhooks:
    def __init__(
        self,
        engine: sa.Engine,
        box: SecretBox,
        policy: OperatorPolicy,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        sender: Sender | None = None,
    ) -> None:
        self.store = WebhookStore(engine, box)
        self.policy = policy
        self.clock = clock
        self.sender = sender or pinned_sender(policy)

    def add(
        self,
        *,
        account_id: str,
        url: str,
        events: str | Iterable[str] | None = None,
        description: str | None = None,
        failing_after: object = None,
    ) -> NewEndpoint:
        """Register ``url`` for ``events`` (default every type); the returned secret is shown once.
        ``failing_after``: consecutive failures of a dataset that send ``export.failing`` (default 3)."""
        validate_account(account_id)
        checked = validate_url(url, self.policy)
        kinds = parse_events(events)
        note = validate_description(description)
        threshold = validate_failing_after(failing_after)
        if len(self.store.list_endpoints(account_id)) >= MAX_ENDPOINTS_PER_ACCOUNT:
            raise ConflictError(
                f"account {account_id} has {MAX_ENDPOINTS_PER_ACCOUNT} webhooks, the most allowed; remove one first"
            )
        admit(self.store.engine, WEBHOOK_ADD, account_id, self.clock())
        return self.store.add_endpoint(
            account_id=account_id,
            url=checked,
            events=kinds,
            description=note,
            now_ms=self.clock(),
            failing_after=threshold,
        )

    def list(self, account_id: str | None = None) -> list[WebhookEndpoint]:
        if account_id is not None:
            validate_account(account_id)
        return self.store.list_endpoints(account_id)

    def get(self, webhook_id: str) -> WebhookEndpoint:
        return self.store.get_endpoint(validate_webhook_id(webhook_id))

    def remove(self, webhook_id: str) -> WebhookEndpoint:
        return self.store.remove_endpoint(validate_webhook_id(webhook_id), self.clock())

    def deliveries(self, webhook_id: str, *, limit: int = 50) -> builtins.list[DeliveryRecord]:
        if not 1 <= limit <= MAX_DELIVERIES_SHOWN:
            raise InvalidInput("limit", f"{limit} is out of range: show 1 to {MAX_DELIVERIES_SHOWN} deliveries")
        self.store.get_endpoint(validate_webhook_id(webhook_id), include_deleted=True)
        return self.store.deliveries(webhook_id, limit=limit)

    def test(self, webhook_id: str) -> DeliveryRecord:
        """Queue a ``webhook.test`` event for this endpoint: the next dispatch sends it, and a failure
        is retried like any event. Returns the pending delivery (its log fills as it is sent)."""
        endpoint = self.get(webhook_id)
        if not endpoint.enabled:
            raise ConflictError(
                f"webhook {endpoint.id} is disabled ({endpoint.disabled_reason}); enable it first "
                f"(`seqexport webhooks enable {endpoint.id}`), then test it"
            )
        now = self.clock()
        admit(self.store.engine, WEBHOOK_TEST, endpoint.account_id, now)
        if self.store.pending(endpoint.account_id) >= MAX_PENDING_PER_ACCOUNT:
            raise RateLimited(
                f"account {endpoint.account_id} has {MAX_PENDING_PER_ACCOUNT} webhook deliveries waiting, the most "
                "allowed; no test was queued; try again once they are sent (see `seqexport webhooks deliveries`)",
                retry_after_ms=60_000,
            )
        delivery_id = self.store.enqueue_test(endpoint, now)
        return self.store.deliveries(endpoint.id, delivery_id=delivery_id)[0]

    def enable(self, webhook_id: str) -> WebhookEndpoint:
        """Re-enable an endpoint its circuit breaker disabled; the deliveries that waited go out next."""
        return self.store.enable_endpoint(validate_webhook_id(webhook_id))

    def rotate_secret(self, webhook_id: str) -> NewEndpoint:
        """A new signing secret, shown this once; every send from now on is signed with it."""
        return self.store.rotate_endpoint_secret(validate_webhook_id(webhook_id))

    def dispatch(self, *, limit: int = 20) -> DispatchReport:
        """Operators: send the due deliveries of every account (what the Dagster sensor does)."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit", f"{limit} is out of range: send 1 to 1000 deliveries per call")
        return dispatch(self.store, self.sender, self.clock, limit=limit)
