"""The authentication gate and the access log, as plain ASGI middleware (outermost of ours).

Every ``/v1`` request is authenticated before routing, so a request without a valid token gets 401
and nothing else, whatever its path, parameters or body (a 401 to a request with a body carries
``Connection: close``: the body is never read, so the server drops it rather than drain it). A
request with no bearer token at all is refused on the event loop, without a thread or a query.

Plain ASGI rather than Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``): that one runs each
request in a task group with memory streams between two tasks, which costs every request, an
attacker's included, a few event-loop turns more; this one wraps ``send`` to see the status.

The access line carries method, path (control characters escaped: the path is the client's),
status, account and duration: never a body, a query value or a header.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqexport_dagster.management.tenancy import Caller
from seqexport_dagster.service.errors import to_response, unauthorized
from seqexport_dagster.service.limits import has_body

access_log = logging.getLogger("seqexport.access")
#: Longest Authorization value looked at: ``Bearer `` and a token (`store.token`) with room to spare.
MAX_AUTHORIZATION: Final = 160


def printable(text: str, limit: int = 512) -> str:
    """``text`` for a log line: control and invisible characters (and ``\\``) as Python escapes, cut at ``limit``."""
    out = "".join(ch if ch.isprintable() and ch != "\\" else ascii(ch)[1:-1] for ch in text[:limit])
    return out + ("[...]" if len(text) > limit else "")


def bearer(scope: Scope) -> str | None:
    """The bearer token of the request, or ``None`` when there is none (or nothing like one)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            if len(value) > MAX_AUTHORIZATION:
                return None
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None


class Gate:
    """Authenticate ``/v1``, log every request. ``authenticate`` runs in a thread (it queries)."""

    def __init__(self, app: ASGIApp, authenticate: Callable[[str], Caller | None]) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        status = 500  # what the log says if the app raises before answering
        caller: Caller | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if path == "/v1" or path.startswith("/v1/"):
                token = bearer(scope)
                try:
                    caller = None if token is None else await run_in_threadpool(self.authenticate, token)
                except Exception as exc:
                    await to_response(exc)(scope, receive, sending)
                    return
                if caller is None:
                    response = unauthorized()
                    if has_body(scope):  # never read: close rather than drain it
                        response.headers["Connection"] = "close"
                    await response(scope, receive, sending)
                    return
                scope.setdefault("state", {})["caller"] = caller
            await self.app(scope, receive, sending)
        finally:
            access_log.info(
                "%s %s %d account=%s %.1fms",
                scope["method"],
                printable(path),
                status,
                caller.label if caller else "-",
                (time.perf_counter() - started) * 1000,
            )
