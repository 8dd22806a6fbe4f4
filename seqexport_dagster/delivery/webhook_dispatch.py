"""The webhook dispatcher: sends due deliveries, signed, pinned, at least once, with backoff, and
so that no account's deliveries can delay another's (issue 41).

One call (`dispatch`) does bounded work: at most ``limit`` deliveries, no new send after
``budget_s``, and each send has its own deadline (`SEND_DEADLINE_S`: name lookup, connect, TLS,
upload and answer). So a call ends within ``budget_s + SEND_DEADLINE_S`` (plus a grace second),
whatever the receivers do. The Dagster sensor (`defs/webhooks.py`) and ``seqexport webhooks
dispatch`` both call it.

Isolation between accounts, and why each piece is there:
- the batch is read in turns across accounts (`WebhookStore.due_deliveries`): one account's backlog
  of thousands never pushes another's fresh delivery out of it;
- sends run concurrently on at most `WORKERS` threads, at most `ACCOUNT_IN_FLIGHT` of them for one
  account and `ENDPOINT_IN_FLIGHT` for one endpoint: receivers that hang take a bounded share of
  the threads, and the rest keep sending for everyone else;
- a circuit breaker disables an endpoint after `BREAKER_FAILURES` failed attempts in a row (any
  deliveries); its deliveries wait, within the account's pending cap (`outbox`), until the customer
  enables it again (``seqexport webhooks enable``, ``POST /v1/webhooks/{id}/enable``);
- an answer that can never change (a 4xx other than 408 and 429) fails the delivery at once
  instead of being retried `MAX_ATTEMPTS` times.

Order for one delivery, and why:
1. claim it (its next attempt is pushed out by `CLAIM_MS`), so a second dispatcher skips it and a
   dispatcher that dies mid-send leaves it due again soon: at least once, never lost;
2. open the endpoint's secret in memory and sign the body recorded with the event (the same bytes
   on every attempt; only ``t`` changes);
3. POST it, on a worker thread, through the bucket destinations' pinned transport (`PinnedSender`
   over `ConnectGuard` with the bounded resolver: the name lookup is inside the deadline too;
   refuse non-public answers, connect to the checked address, no proxies, no redirects; the
   answer is read up to `MAX_ANSWER_BYTES` and no further);
4. record the attempt (status code or error, never the secret, never the URL), the outcome and the
   breaker, on the dispatching thread: a 2xx delivers; a 4xx other than 408/429 fails; anything
   else retries after `retry_delay_ms` until `MAX_ATTEMPTS`, then failed.
A receiver may therefore see an event twice (an answer lost after it was processed): it
deduplicates on the event id (``Sequenzy-Event-Id``, and ``id`` in the body).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

from seqexport_dagster.delivery.webhook import EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER, signature_header
from seqexport_dagster.destination.endpoint import ConnectGuard, Resolver, system_resolver
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3_deadline import bounded_resolver
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
DEFAULT_LIMIT: Final = 200
#: No new send starts after this many seconds of a call; sends under way end by their deadline.
DEFAULT_BUDGET_S: Final = 8.0
USER_AGENT: Final = "Sequenzy-Webhooks/1"
#: Sends at once, fleet-wide, per dispatcher; per account; per endpoint.
WORKERS: Final = 8
ACCOUNT_IN_FLIGHT: Final = 4
ENDPOINT_IN_FLIGHT: Final = 2
#: Failed attempts in a row (whatever the deliveries) that disable an endpoint.
BREAKER_FAILURES: Final = 15
#: 4xx answers that may change on a later attempt (timeout, throttled): retried like a 5xx.
RETRYABLE_4XX: Final = frozenset({408, 429})


def is_final_failure(status_code: int | None) -> bool:
    """A 4xx other than 408/429: the receiver refuses this request as it is, and will again."""
    return status_code is not None and 400 <= status_code < 500 and status_code not in RETRYABLE_4XX


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
    ``resolver`` is the seam tests use to play a name that resolves to a private address; it runs
    under `bounded_resolver`, as bucket destinations' does, so a lookup that hangs ends with the
    attempt's deadline."""

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
            ConnectGuard(policy, resolver=bounded_resolver(resolver)),
            frozenset({host}),
            connect_timeout=min(5.0, deadline_s),
            read_timeout=deadline_s,
            deadline_s=deadline_s,
            max_response_bytes=MAX_ANSWER_BYTES,
            truncate_answer=True,
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
        except TimeoutError:
            return SendResult(None, f"looking up {host} did not finish within {deadline_s:g} s")
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
    #: Endpoints this call's attempts disabled (circuit breaker).
    disabled: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "attempted": self.attempted,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "failed": self.failed,
            "canceled": self.canceled,
            "disabled": self.disabled,
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
    signing_clock: Callable[[], int] = _wall_s,
    workers: int = WORKERS,
) -> DispatchReport:
    """Send up to ``limit`` due deliveries, fairly across accounts; returns within ``budget_s`` +
    `SEND_DEADLINE_S` + 1 s. A send still running then (a `Sender` that ignores its deadline) is
    left behind: its delivery stays claimed and is due again after `CLAIM_MS`."""
    report = DispatchReport()
    started = time.monotonic()
    queue = deque(store.due_deliveries(clock(), limit))
    endpoints: dict[str, WebhookEndpoint | None] = {}
    per_account: Counter[str] = Counter()
    per_endpoint: Counter[str] = Counter()
    running: dict[Future[tuple[SendResult, int]], DueDelivery] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="seqexport-webhook")
    try:
        while queue or running:
            if time.monotonic() - started > budget_s:
                queue.clear()  # not claimed: due again for the next call
            waiting: deque[DueDelivery] = deque()
            while queue and len(running) < workers:
                delivery = queue.popleft()
                if per_account[delivery.account_id] >= ACCOUNT_IN_FLIGHT or (
                    per_endpoint[delivery.endpoint_id] >= ENDPOINT_IN_FLIGHT
                ):
                    waiting.append(delivery)
                    continue
                job = _start(store, send, pool, delivery, endpoints, clock, signing_clock, report)
                if job is not None:
                    running[job] = delivery
                    per_account[delivery.account_id] += 1
                    per_endpoint[delivery.endpoint_id] += 1
            queue.extendleft(reversed(waiting))
            if not running:
                break
            left = started + budget_s + SEND_DEADLINE_S + 1.0 - time.monotonic()
            done, _ = wait(running, timeout=max(left, 0.0), return_when=FIRST_COMPLETED)
            if not done:
                break
            for job in done:
                delivery = running.pop(job)
                per_account[delivery.account_id] -= 1
                per_endpoint[delivery.endpoint_id] -= 1
                try:
                    result, took = job.result(timeout=0)
                except (FutureTimeout, Exception) as exc:  # a Sender must not raise; record it, go on
                    result, took = SendResult(None, f"sending failed ({type(exc).__name__})"), 0
                if _record(store, delivery, result, took, clock(), report):
                    endpoints[delivery.endpoint_id] = None  # disabled now: its queued deliveries wait
                    queue = deque(q for q in queue if q.endpoint_id != delivery.endpoint_id)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return report


def _start(
    store: WebhookStore,
    send: Sender,
    pool: ThreadPoolExecutor,
    delivery: DueDelivery,
    endpoints: dict[str, WebhookEndpoint | None],
    clock: Callable[[], int],
    signing_clock: Callable[[], int],
    report: DispatchReport,
) -> Future[tuple[SendResult, int]] | None:
    """Claim, sign and hand one delivery to the pool (None: nothing to send)."""
    now = clock()
    if delivery.endpoint_id not in endpoints:
        try:
            endpoints[delivery.endpoint_id] = store.get_endpoint(delivery.endpoint_id)
        except NotFound:
            endpoints[delivery.endpoint_id] = None
            if store.claim(delivery, now + CLAIM_MS):
                store.cancel(delivery, now)
                report.canceled += 1
            return None
    endpoint = endpoints[delivery.endpoint_id]
    if endpoint is None or not endpoint.enabled or not store.claim(delivery, now + CLAIM_MS):
        return None
    report.attempted += 1
    prepared = _prepare(store, endpoint, delivery, signing_clock)
    if isinstance(prepared, SendResult):
        done: Future[tuple[SendResult, int]] = Future()
        done.set_result((prepared, 0))
        return done
    headers, body = prepared
    return pool.submit(_timed, send, endpoint.url, headers, body)


def _timed(send: Sender, url: str, headers: dict[str, str], body: bytes) -> tuple[SendResult, int]:
    began = time.monotonic()
    result = send(url, headers, body)
    return result, int((time.monotonic() - began) * 1000)


def _prepare(
    store: WebhookStore, endpoint: WebhookEndpoint, delivery: DueDelivery, signing_clock: Callable[[], int]
) -> tuple[dict[str, str], bytes] | SendResult:
    """The signed request's headers and body, or the failure to record when the secret won't open."""
    body = delivery.body.encode()
    try:
        secret = store.endpoint_secret(endpoint)
    except ExportError as exc:
        return SendResult(None, f"the endpoint's secret could not be opened: {exc.message}")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_ID_HEADER: delivery.event_id,
        EVENT_TYPE_HEADER: delivery.event_type,
        SIGNATURE_HEADER: signature_header(secret, signing_clock(), body),
    }
    del secret
    return headers, body


def _record(
    store: WebhookStore, delivery: DueDelivery, result: SendResult, took: int, now: int, report: DispatchReport
) -> bool:
    """Record the attempt; True when it tripped the endpoint's circuit breaker."""
    attempts = delivery.attempts + 1
    error = None if result.error is None else sanitize_error(result.error, 500)
    if result.ok:
        next_at = None
        report.delivered += 1
    elif attempts >= MAX_ATTEMPTS or is_final_failure(result.status_code):
        next_at = None
        report.failed += 1
    else:
        next_at = now + retry_delay_ms(attempts)
        report.retrying += 1
    tripped = store.record_attempt(
        delivery,
        now_ms=now,
        status_code=result.status_code,
        error=error,
        duration_ms=took,
        delivered=result.ok,
        next_attempt_at=next_at,
        breaker_after=BREAKER_FAILURES,
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
    if tripped:
        report.disabled += 1
        log.warning(
            "webhook %s disabled after %d failed attempts in a row; its customer re-enables it",
            delivery.endpoint_id,
            BREAKER_FAILURES,
        )
    return tripped
