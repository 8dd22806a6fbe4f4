"""Webhooks: which URLs an account may register, which events it may take, and the signature.

A URL passes the bucket endpoint's rules (`destination.endpoint.validate_endpoint`: https, a public
DNS name, an allowed port, no user info; with the operator's ``SEQEXPORT_ALLOW_LOCAL`` also http
and loopback, for tests), plus a path and a query of its own; a fragment is refused. The address
is checked again at connect time, pinned (`webhook_dispatch`).

The signature is Stripe's scheme: ``Sequenzy-Signature: t=<unix seconds>,v1=<hex>``, where ``v1``
is HMAC-SHA256 under the endpoint's secret of ``"<t>.<body>"``. A receiver recomputes it over the
raw body and refuses an old ``t`` (replays); `verify_signature` is that check, which the customer
docs show.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from seqexport_dagster.destination.endpoint import validate_endpoint
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.store.webhook_records import EVENT_TYPES, FAILING_AFTER, MAX_FAILING_AFTER

SIGNATURE_HEADER: Final = "Sequenzy-Signature"
EVENT_ID_HEADER: Final = "Sequenzy-Event-Id"
EVENT_TYPE_HEADER: Final = "Sequenzy-Event-Type"
#: A receiver should refuse a signature older than this (replay protection).
TOLERANCE_S: Final = 300
MAX_URL_CHARS: Final = 2048
MAX_DESCRIPTION_CHARS: Final = 256
MAX_ENDPOINTS_PER_ACCOUNT: Final = 20
_BUCKET_EXAMPLE: Final = "https://<account-id>.r2.cloudflarestorage.com"


def validate_url(url: str, policy: OperatorPolicy) -> str:
    """The URL normalized (scheme and host lower-case, default port dropped), or `InvalidInput` on
    ``url`` saying what is accepted. Host and port go through the bucket endpoint's own check."""
    text = (url or "").strip()
    if not text:
        raise InvalidInput("url", "give the https:// URL that should receive the events")
    if len(text) > MAX_URL_CHARS:
        raise InvalidInput("url", f"the URL is {len(text)} characters long; at most {MAX_URL_CHARS} are accepted")
    if "#" in text:
        raise InvalidInput("url", "the URL has a fragment (#...); a fragment is never sent, so leave it out")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise InvalidInput("url", f"not a valid URL ({exc}); use https://host/path") from None
    origin = f"{parts.scheme}://{parts.netloc}"
    try:
        checked = validate_endpoint(origin, policy)
    except InvalidInput as exc:
        # The bucket rule's own words, with a webhook's example in place of a bucket endpoint's.
        problem = exc.problem.replace(_BUCKET_EXAMPLE, "https://hooks.example.com/sequenzy").replace("endpoint", "URL")
        raise InvalidInput("url", problem) from None
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in parts.path + parts.query):
        raise InvalidInput("url", "the URL's path or query contains spaces or control characters; percent-encode them")
    path = parts.path or "/"
    return checked + path + (f"?{parts.query}" if parts.query else "")


def parse_events(events: str | Iterable[str] | None) -> tuple[str, ...]:
    """``*`` (or nothing) for every type, else known types; `InvalidInput` on ``events`` otherwise."""
    if events is None:
        return ("*",)
    names = [e.strip() for e in (events.split(",") if isinstance(events, str) else events)]
    names = [n for n in names if n]
    if not names or names == ["*"]:
        return ("*",)
    unknown = [n for n in names if n not in EVENT_TYPES]
    if unknown:
        shown = ", ".join(repr(u[:64]) for u in unknown[:3])
        raise InvalidInput("events", f"unknown event type {shown}; use * or any of {', '.join(EVENT_TYPES)}")
    return tuple(dict.fromkeys(names))


def validate_failing_after(value: object) -> int:
    """How many consecutive failures of a dataset send ``export.failing`` (None: the default)."""
    if value is None:
        return FAILING_AFTER
    try:
        number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_FAILING_AFTER:
        raise InvalidInput(
            "failing_after",
            f"use a whole number of consecutive failures from 1 to {MAX_FAILING_AFTER} (default {FAILING_AFTER})",
        )
    return number


def validate_description(text: str | None) -> str:
    value = (text or "").strip()
    if len(value) > MAX_DESCRIPTION_CHARS or any(not ch.isprintable() for ch in value):
        raise InvalidInput(
            "description", f"use at most {MAX_DESCRIPTION_CHARS} printable characters (a note for you, never sent)"
        )
    return value


def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify_signature(
    secret: str, header: str, body: bytes, *, now_s: int | None = None, tolerance_s: int = TOLERANCE_S
) -> bool:
    """What a receiver checks: some ``v1`` matches, and ``t`` is within the tolerance of now.
    False, never an exception, for any header: ``t=²`` passes ``str.isdigit`` but not ``int``, and
    ``compare_digest`` raises on a str that is not ASCII (``v1=é``), so both are checked as ASCII."""
    fields = [item.partition("=") for item in header.split(",")]
    stamps = [v.strip() for k, _, v in fields if k.strip() == "t"]
    candidates = [v.strip().encode("utf-8", "replace") for k, _, v in fields if k.strip() == "v1"]
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()) or not candidates:
        return False
    timestamp = int(stamps[0])
    now = int(time.time()) if now_s is None else now_s
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body).encode()
    return any(hmac.compare_digest(expected, c) for c in candidates)


def validate_webhook_id(webhook_id: str) -> str:
    if not (webhook_id.startswith("whk_") and len(webhook_id) == 20 and webhook_id[4:].isalnum()):
        raise InvalidInput("webhook_id", f"{webhook_id[:80]!r} is not a webhook id: ids look like whk_0123456789abcdef")
    return webhook_id
