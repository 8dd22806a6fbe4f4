"""The webhook dispatcher: sends due deliveries, signed, pinned, at least once, with backoff.

One call (`dispatch`) does bounded work: at most ``limit`` deliveries and no new send after
``budget_s``; each send has its own deadline (`SEND_DEADLINE_S`: connect, TLS, upload and answer).
The Dagster sensor (`defs/webhooks.py`) and ``seqexport webhooks dispatch`` both call it.

Order for one delivery, and why:
1. claim it (its next attempt is pushed out by `CLAIM_MS`), so a second dispatcher skips it and a
   dispatcher that dies mid-send leaves it due again soon: at least once, never lost;
2. open the endpoint's secret in memory and sign the body recorded with the event (the same bytes
   on every attempt; only ``t`` changes);
3. POST it through the bucket destinations' pinned transport (`PinnedSender` over `ConnectGuard`:
   resolve once, refuse non-public answers, connect to the checked address, no proxies, no
   redirects, bounded answer);
4. record the attempt (status code or error, never the secret, never the URL) and the outcome: a
   2xx delivers; anything else retries after `retry_delay_ms` until `MAX_ATTEMPTS`, then failed.
A receiver may therefore see an event twice (an answer lost after it was processed): it
deduplicates on the event id (``Sequenzy-Event-Id``, and ``id`` in the body).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

from seqexport_dagster.delivery.webhook import EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER, signature_header
from seqexport_dagster.destination.endpoint import ConnectGuard, Resolver, system_resolver
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ExportError, NotFound, sanitize_error
from seqexport_dagster.store.webhook_records import DueDelivery, WebhookEndpoint

if TYPE_CHECKING:
    from seqexport_dagster.store.webhooks import WebhookStore

log = logging.getLogger("seqexport.webhooks")

MAX_ATTEMPTS: Final = 10
FIRST_RETRY_MS: Final = 30_000
MAX_RETRY_MS: Final = 6 * 3600 * 1000
CLAIM_MS: Final = 120_000
SEND_DEADLINE_S: Final = 10.0
#: A receiver's answer is not read past this (it is not used; only the status code counts).
MAX_ANSWER_BYTES: Final = 64 * 1024
DEFAULT_LIMIT: Final = 20
DEFAULT_BUDGET_S: Final = 40.0
USER_AGENT: Final = "Sequenzy-Webhooks/1"


def retry_delay_ms(attempts: int) -> int:
    """After the ``attempts``-th failed attempt: 30 s, 1 min, 2 min, ... at most 6 h."""
    return int(min(FIRST_RETRY_MS * 2 ** (attempts - 1), MAX_RETRY_MS))


@dataclass(frozen=True, slots=True)
class SendResult:
    status_code: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class Sender(Protocol):
    def __call__(self, url: str, headers: dict[str, str], body: bytes) -> SendResult: ...


def pinned_sender(
    policy: OperatorPolicy, *, deadline_s: float = SEND_DEADLINE_S, resolver: Resolver = system_resolver
) -> Sender:
    """POSTs through `PinnedSender` (the S3 transport's pinned, bounded sender), one per URL's host.
    ``resolver`` is the seam tests use to play a name that resolves to a private address."""

    def send(url: str, headers: dict[str, str], body: bytes) -> SendResult:
        # botocore is imported here: validating or listing webhooks must not pay for it.
        from botocore.awsrequest import AWSPreparedRequest, HTTPHeaders
        from botocore.exceptions import (
            BotoCoreError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
            SSLError,
        )

        from seqexport_dagster.destination.s3_transport import PinnedSender

        host = (urlsplit(url).hostname or "").lower()
        sender = PinnedSender(
            ConnectGuard(policy, resolver=resolver),
            frozenset({host}),
            connect_timeout=min(5.0, deadline_s),
            read_timeout=deadline_s,
            deadline_s=deadline_s,
            max_response_bytes=MAX_ANSWER_BYTES,
            max_pool_connections=1,
        )
        try:
            with sender.budget():
                answer = sender.send(AWSPreparedRequest("POST", url, _headers(HTTPHeaders, headers), body, False))
            return SendResult(int(answer.status_code), None)
        except ExportError as exc:
            return SendResult(None, exc.message.replace("PutObject", "the webhook"))
        except SSLError:
            return SendResult(None, f"TLS with {host} failed (certificate not valid for the host, or no TLS)")
        except EndpointConnectionError:
            return SendResult(None, f"could not connect to {host}")
        except ConnectTimeoutError:
            return SendResult(None, f"connecting to {host} timed out")
        except ReadTimeoutError:
            return SendResult(None, f"{host} did not answer within {deadline_s:g} s")
        except ConnectionClosedError:
            return SendResult(None, f"{host} closed the connection before answering")
        except BotoCoreError as exc:
            return SendResult(None, f"sending to {host} failed ({type(exc).__name__})")
        finally:
            sender.close()

    return send


def _headers(kind: Any, values: dict[str, str]) -> Any:
    headers = kind()
    for name, value in values.items():
        headers[name] = value
    return headers


@dataclass(slots=True)
class DispatchReport:
    attempted: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    canceled: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "attempted": self.attempted,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "failed": self.failed,
            "canceled": self.canceled,
        }


def _wall_s() -> int:
    return int(time.time())


def dispatch(
    store: WebhookStore,
    send: Sender,
    clock: Callable[[], int],
    *,
    limit: int = DEFAULT_LIMIT,
    budget_s: float = DEFAULT_BUDGET_S,
    delivery_id: int | None = None,
    signing_clock: Callable[[], int] = _wall_s,
) -> DispatchReport:
    """Send up to ``limit`` due deliveries (or just ``delivery_id``, if due)."""
    report = DispatchReport()
    started = time.monotonic()
    endpoints: dict[str, WebhookEndpoint | None] = {}
    for delivery in store.due_deliveries(clock(), limit, delivery_id=delivery_id):
        if time.monotonic() - started > budget_s:
            break
        now = clock()
        if not store.claim(delivery, now + CLAIM_MS):
            continue
        if delivery.endpoint_id not in endpoints:
            try:
                endpoints[delivery.endpoint_id] = store.get_endpoint(delivery.endpoint_id)
            except NotFound:
                endpoints[delivery.endpoint_id] = None
        endpoint = endpoints[delivery.endpoint_id]
        if endpoint is None:
            store.cancel(delivery, now)
            report.canceled += 1
            continue
        report.attempted += 1
        result, took = _send_one(store, send, endpoint, delivery, signing_clock)
        _record(store, delivery, result, took, clock(), report)
    return report


def _send_one(
    store: WebhookStore,
    send: Sender,
    endpoint: WebhookEndpoint,
    delivery: DueDelivery,
    signing_clock: Callable[[], int],
) -> tuple[SendResult, int]:
    body = delivery.body.encode()
    began = time.monotonic()
    try:
        secret = store.endpoint_secret(endpoint)
    except ExportError as exc:
        return SendResult(None, f"the endpoint's secret could not be opened: {exc.message}"), 0
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_ID_HEADER: delivery.event_id,
        EVENT_TYPE_HEADER: delivery.event_type,
        SIGNATURE_HEADER: signature_header(secret, signing_clock(), body),
    }
    del secret
    result = send(endpoint.url, headers, body)
    return result, int((time.monotonic() - began) * 1000)


def _record(
    store: WebhookStore, delivery: DueDelivery, result: SendResult, took: int, now: int, report: DispatchReport
) -> None:
    attempts = delivery.attempts + 1
    error = None if result.error is None else sanitize_error(result.error, 500)
    if result.ok:
        next_at = None
        report.delivered += 1
    elif attempts >= MAX_ATTEMPTS:
        next_at = None
        report.failed += 1
    else:
        next_at = now + retry_delay_ms(attempts)
        report.retrying += 1
    store.record_attempt(
        delivery,
        now_ms=now,
        status_code=result.status_code,
        error=error,
        duration_ms=took,
        delivered=result.ok,
        next_attempt_at=next_at,
    )
    log.info(
        "webhook delivery %s event %s (%s) to %s: attempt %d, %s",
        delivery.id,
        delivery.event_id,
        delivery.event_type,
        delivery.endpoint_id,
        attempts,
        f"HTTP {result.status_code}" if result.status_code is not None else error,
    )
