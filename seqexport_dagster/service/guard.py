"""Abuse limits and safe retries for the operations that need them.

`RateLimit`: a sliding window per account over the operations that write to an address the caller
chose (create, destination change). It is per server process; with several processes behind a load
balancer each allows its own share, which is what a per-process limit is for (abuse, not billing).

`idempotent`: the Idempotency-Key protocol over `store.idempotency.IdempotencyStore`. The stored
fingerprint is an HMAC-SHA256, under a key derived from ``SEQEXPORT_SECRET_KEYS``, of the operation
and the canonical request body with its secrets left out: whoever reads the control plane can
neither test guessed secrets against it nor tell that two accounts sent the same body. Keys live in
the caller's namespace (`tenancy.Caller.namespace`), and the route checks that the caller may act
on what the request names before this runs, so a replay never answers a request the caller could
not make.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse, Response

from seqexport_dagster.errors import ConflictError, InvalidInput, TooManyRequests
from seqexport_dagster.store.idempotency import Claimed, IdempotencyStore, InProgress, Mismatch, Replay


@dataclass
class RateLimit:
    calls: int = 10
    per_s: float = 60.0
    now: Callable[[], float] = time.monotonic
    _seen: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """``10/60``: ten writes per sixty seconds."""
        try:
            calls, per = text.split("/")
            limit = cls(int(calls), float(per))
        except ValueError:
            raise InvalidInput("write-limit", f"{text!r} is not CALLS/SECONDS, e.g. 10/60") from None
        if limit.calls < 1 or not limit.per_s > 0:
            raise InvalidInput("write-limit", f"{text!r}: use at least one call per a positive number of seconds")
        return limit

    def check(self, account_id: str) -> None:
        with self._lock:
            now = self.now()
            seen = self._seen.setdefault(account_id, deque())
            while seen and seen[0] <= now - self.per_s:
                seen.popleft()
            if len(seen) >= self.calls:
                wait = max(1, math.ceil(seen[0] + self.per_s - now))
                raise TooManyRequests(
                    f"account {account_id} made {self.calls} writes to a destination in {self.per_s:g} s; "
                    f"retry in {wait} s",
                    wait,
                )
            seen.append(now)


#: Body fields that never enter a fingerprint.
SECRET_FIELDS = frozenset({"secret_access_key"})


def fingerprint(key: bytes, operation: str, body: object) -> str:
    """HMAC-SHA256 under ``key`` of ``[operation, body]`` as canonical JSON, secrets left out."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in SECRET_FIELDS}
    canonical = json.dumps([operation, body], sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def idempotent(
    store: IdempotencyStore,
    *,
    caller: str,
    key: str | None,
    operation: str,
    body: object,
    now_ms: int,
    run: Callable[[], tuple[int, object]],
    fingerprint_key: bytes,
    replay_body: Callable[[object], object] | None = None,
) -> Response:
    """Run ``run`` once per (caller, key) within 24 h; a repeat gets the first answer again.

    ``caller`` is the namespace (scope and account); ``operation`` a fixed route template (the ids
    it names go in ``body``), so nothing a client chose reaches a column unchecked. ``replay_body``
    is what is kept for a repeat when the first answer holds something shown once (a webhook's
    secret): the control plane never stores it in clear.
    """
    if key is None:
        status, result = run()
        return JSONResponse(result, status_code=status)
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable() or not key.strip():
        raise InvalidInput("Idempotency-Key", "use 1 to 255 printable ASCII characters, e.g. a UUID")
    outcome = store.claim(caller, key, operation, fingerprint(fingerprint_key, operation, body), now_ms)
    if isinstance(outcome, Replay):
        return Response(
            outcome.body,
            status_code=outcome.status_code,
            media_type="application/json",
            headers={"Idempotent-Replayed": "true"},
        )
    if isinstance(outcome, Mismatch):
        raise ConflictError("this Idempotency-Key was used for a different request; use a new key for a new request")
    if isinstance(outcome, InProgress):
        raise ConflictError("a request with this Idempotency-Key is still being answered; retry in a moment")
    assert isinstance(outcome, Claimed)
    try:
        status, result = run()
    except BaseException:
        store.release(caller, key)
        raise
    response = JSONResponse(result, status_code=status)
    kept = response if replay_body is None else JSONResponse(replay_body(result), status_code=status)
    store.finish(caller, key, status, bytes(kept.body).decode())
    return response
