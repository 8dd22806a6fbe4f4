"""The remote CLI's `webhooks_api.Webhooks`: the same methods over ``/v1/webhooks`` with the token.

What can be checked here (events, description, the id's shape) is checked before anything is sent;
the URL's rules are the server's (its operator policy decides whether local URLs are allowed).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from seqexport_dagster.delivery.webhook import (
    parse_events,
    validate_description,
    validate_failing_after,
    validate_webhook_id,
)
from seqexport_dagster.delivery.webhook_dispatch import DispatchReport
from seqexport_dagster.management import webhook_presentation as shapes
from seqexport_dagster.management.api_client import ApiClient
from seqexport_dagster.store.webhook_records import DeliveryRecord, NewEndpoint, WebhookEndpoint


class RemoteWebhooks:
    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def add(
        self,
        *,
        account_id: str,
        url: str,
        events: str | Iterable[str] | None = None,
        description: str | None = None,
        failing_after: object = None,
    ) -> NewEndpoint:
        body: dict[str, Any] = {
            "account_id": account_id,
            "url": url,
            "events": list(parse_events(events)),
            "description": validate_description(description),
            "failing_after": validate_failing_after(failing_after),
        }
        return shapes.new_webhook_from_json(self.api.call("POST", "/v1/webhooks", json=body))

    def list(self, account_id: str | None = None) -> list[WebhookEndpoint]:
        params = {"account": account_id} if account_id else {}
        return [shapes.webhook_from_json(w) for w in self.api.call("GET", "/v1/webhooks", params=params)]

    def get(self, webhook_id: str) -> WebhookEndpoint:
        return shapes.webhook_from_json(self.api.call("GET", f"/v1/webhooks/{validate_webhook_id(webhook_id)}"))

    def remove(self, webhook_id: str) -> WebhookEndpoint:
        path = f"/v1/webhooks/{validate_webhook_id(webhook_id)}"
        return shapes.webhook_from_json(self.api.call("DELETE", path))

    def test(self, webhook_id: str) -> DeliveryRecord:
        path = f"/v1/webhooks/{validate_webhook_id(webhook_id)}/test"
        return shapes.delivery_from_json(self.api.call("POST", path))

    def enable(self, webhook_id: str) -> WebhookEndpoint:
        path = f"/v1/webhooks/{validate_webhook_id(webhook_id)}/enable"
        return shapes.webhook_from_json(self.api.call("POST", path))

    def rotate_secret(self, webhook_id: str) -> NewEndpoint:
        path = f"/v1/webhooks/{validate_webhook_id(webhook_id)}/rotate-secret"
        return shapes.new_webhook_from_json(self.api.call("POST", path))

    def deliveries(self, webhook_id: str, *, limit: int = 50) -> builtins.list[DeliveryRecord]:
        path = f"/v1/webhooks/{validate_webhook_id(webhook_id)}/deliveries"
        return [shapes.delivery_from_json(d) for d in self.api.call("GET", path, params={"limit": limit})]

    def dispatch(self, *, limit: int = 20) -> DispatchReport:
        answer = self.api.call("POST", "/v1/admin/webhooks/dispatch", params={"limit": limit})
        return DispatchReport(**{f.name: int(answer.get(f.name, 0)) for f in fields(DispatchReport)})
