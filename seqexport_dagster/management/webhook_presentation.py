"""The JSON shapes of webhooks, defined once: `seqexport webhooks --json` prints them, the HTTP API
returns them, and the remote CLI reads them back (``*_from_json``). No shape carries the secret,
except `NewWebhookJson`, the answer to an add, which is the one time it is shown.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from seqexport_dagster.contract.window import iso_ms, parse_iso_ms
from seqexport_dagster.store.webhook_records import (
    FAILING_AFTER,
    AttemptRecord,
    DeliveryRecord,
    NewEndpoint,
    WebhookEndpoint,
)


class WebhookJson(TypedDict):
    id: str
    account_id: str
    url: str
    events: list[str]
    description: str
    failing_after: int
    created_at: str
    deleted_at: str | None
    #: "enabled", or "disabled" by the circuit breaker (`disabled_reason` says after what).
    status: str
    consecutive_failures: int
    disabled_at: str | None
    disabled_reason: str | None


class NewWebhookJson(WebhookJson):
    secret: str


class AttemptJson(TypedDict):
    attempt: int
    at: str
    status_code: int | None
    error: str | None
    duration_ms: int


class DeliveryJson(TypedDict):
    id: int
    event_id: str
    event_type: str
    webhook_id: str
    status: str
    attempts: int
    next_attempt_at: str | None
    created_at: str
    finished_at: str | None
    log: list[AttemptJson]


class DispatchJson(TypedDict):
    attempted: int
    delivered: int
    retrying: int
    failed: int
    canceled: int
    disabled: int


def _iso(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)


def _ms(text: str | None) -> int | None:
    return None if text is None else parse_iso_ms(text)


def webhook_json(e: WebhookEndpoint) -> WebhookJson:
    return {
        "id": e.id,
        "account_id": e.account_id,
        "url": e.url,
        "events": list(e.events),
        "description": e.description,
        "failing_after": e.failing_after,
        "created_at": iso_ms(e.created_at),
        "deleted_at": _iso(e.deleted_at),
        "status": "enabled" if e.enabled else "disabled",
        "consecutive_failures": e.consecutive_failures,
        "disabled_at": _iso(e.disabled_at),
        "disabled_reason": e.disabled_reason,
    }


def new_webhook_json(n: NewEndpoint) -> NewWebhookJson:
    return {**webhook_json(n.endpoint), "secret": n.secret}


def webhook_from_json(body: WebhookJson | dict[str, Any]) -> WebhookEndpoint:
    return WebhookEndpoint(
        id=body["id"],
        account_id=body["account_id"],
        url=body["url"],
        events=tuple(body["events"]),
        description=body["description"],
        failing_after=int(body.get("failing_after", FAILING_AFTER)),
        created_at=parse_iso_ms(body["created_at"]),
        deleted_at=_ms(body["deleted_at"]),
        consecutive_failures=int(body.get("consecutive_failures", 0)),
        disabled_at=_ms(body.get("disabled_at")),
        disabled_reason=body.get("disabled_reason"),
    )


def new_webhook_from_json(body: NewWebhookJson | dict[str, Any]) -> NewEndpoint:
    return NewEndpoint(webhook_from_json(body), body["secret"])


def delivery_json(d: DeliveryRecord) -> DeliveryJson:
    return {
        "id": d.id,
        "event_id": d.event_id,
        "event_type": d.event_type,
        "webhook_id": d.endpoint_id,
        "status": d.status,
        "attempts": d.attempts,
        "next_attempt_at": _iso(d.next_attempt_at),
        "created_at": iso_ms(d.created_at),
        "finished_at": _iso(d.finished_at),
        "log": [
            {
                "attempt": a.attempt,
                "at": iso_ms(a.attempted_at),
                "status_code": a.status_code,
                "error": a.error,
                "duration_ms": a.duration_ms,
            }
            for a in d.log
        ],
    }


def delivery_from_json(body: DeliveryJson | dict[str, Any], account_id: str = "") -> DeliveryRecord:
    return DeliveryRecord(
        id=body["id"],
        event_id=body["event_id"],
        event_type=body["event_type"],
        endpoint_id=body["webhook_id"],
        account_id=account_id,
        status=body["status"],
        attempts=body["attempts"],
        next_attempt_at=_ms(body["next_attempt_at"]),
        created_at=parse_iso_ms(body["created_at"]),
        finished_at=_ms(body["finished_at"]),
        log=tuple(
            AttemptRecord(a["attempt"], parse_iso_ms(a["at"]), a["status_code"], a["error"], a["duration_ms"])
            for a in body["log"]
        ),
    )
