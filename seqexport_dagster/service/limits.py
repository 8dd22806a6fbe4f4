"""Bounded requests: what one request may cost the server before any route sees it.

`BoundedBodies` is plain ASGI middleware under the authentication gate (`app.gate`), so a request
without a valid token gets its 401 before a byte of its body is read. For the others, in order:

1. at most `Limits.max_headers` headers (431);
2. a declared ``Content-Length`` above `Limits.max_body_bytes` is refused before anything is read
   (413); a chunked body is counted as it arrives and refused as soon as it passes the cap;
3. the whole body must arrive within `Limits.body_timeout_s` (408);
4. a body must be UTF-8 JSON, nested at most `Limits.max_json_depth` deep, with integers of at most
   `Limits.max_int_digits` digits and finite numbers (400, naming the problem).

A refusal carries ``Connection: close``: the server then drops the connection instead of draining
an upload nobody will read. The body, once accepted, is handed on as it was (FastAPI parses it
again: at most 64 KB, so that costs well under a millisecond).

Header size, header read time, keep-alive and the connection count are bounded one layer lower,
in the HTTP protocol (`service.protocol`), because they happen before there is a request at all.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqexport_dagster.errors import RequestRefused
from seqexport_dagster.service.errors import error_response

KB: Final = 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may hold. Defaults are the served values; tests and benchmarks shrink timeouts."""

    max_body_bytes: int = 64 * KB
    max_headers: int = 64
    #: h11's bound on the request line plus headers (a bigger head is a 400 and a closed connection).
    max_header_bytes: int = 16 * KB
    max_json_depth: int = 16
    max_int_digits: int = 20
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 1000


_BODYLESS: Final = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


def check_json(raw: bytes, limits: Limits) -> None:
    """Refuse, naming the problem, a body that is not small, finite, shallow UTF-8 JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestRefused(400, "invalid_input", f"the body is not valid UTF-8 (byte {exc.start})") from None

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip("-")) > limits.max_int_digits:
            raise RequestRefused(
                400,
                "invalid_input",
                f"the body has an integer of {len(digits)} digits; at most {limits.max_int_digits}",
            )
        return int(digits)

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise RequestRefused(400, "invalid_input", f"the body has a number out of range ({number[:24]})")
        return value

    def refuse_constant(name: str) -> Any:
        raise RequestRefused(400, "invalid_input", f"the body has {name}, which is not JSON")

    try:
        value = json.loads(text, parse_int=bounded_int, parse_float=finite, parse_constant=refuse_constant)
    except RecursionError:
        raise RequestRefused(
            400, "invalid_input", f"the body is nested too deeply; at most {limits.max_json_depth} levels"
        ) from None
    except json.JSONDecodeError as exc:
        raise RequestRefused(
            400, "invalid_input", f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if _depth(value) > limits.max_json_depth:
        raise RequestRefused(
            400, "invalid_input", f"the body is nested too deeply; at most {limits.max_json_depth} levels"
        )


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 refuses a malformed Content-Length before we get here
    return None


def has_body(scope: Scope) -> bool:
    """Whether the request says it carries a body (a declared length above 0, or chunked)."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False


async def _refuse(send: Send, status: int, kind: str, message: str) -> None:
    response = error_response(status, kind, message, "body" if status == 400 else None, Connection="close")
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": bytes(response.body), "more_body": False})


class BoundedBodies:
    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        if len(scope["headers"]) > limits.max_headers:
            await _refuse(send, 431, "too_many_headers", f"the request has more than {limits.max_headers} headers")
            return
        if scope["method"] in _BODYLESS and not has_body(scope):
            await self.app(scope, receive, send)
            return
        length = declared_length(scope)
        if length is not None and length > limits.max_body_bytes:
            await _refuse(
                send, 413, "too_large", f"the body is {length} bytes; at most {limits.max_body_bytes} are accepted"
            )
            return
        try:
            body = await asyncio.wait_for(self._read(receive), limits.body_timeout_s)
            if body:
                check_json(body, limits)
        except TimeoutError:
            await _refuse(send, 408, "timeout", f"the body did not arrive within {limits.body_timeout_s:g} s")
            return
        except RequestRefused as refused:
            await _refuse(send, refused.status, refused.kind, refused.message)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, whenever it comes

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestRefused(400, "invalid_input", "the client went away before the body was complete")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                raise RequestRefused(
                    413, "too_large", f"the body is over {self.limits.max_body_bytes} bytes; no more are accepted"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
