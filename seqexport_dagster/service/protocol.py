"""Bounded connections: uvicorn's h11 protocol with the deadlines it lacks.

Why h11 and not httptools (uvicorn's default when installed): httptools has no bound on the size or
number of headers, so one 64 MB header was read whole and answered 200. h11 refuses a request head
above ``max_incomplete_event_size`` (`Limits.max_header_bytes`) and closes the connection; this
protocol answers that case itself with a 431 that says so (h11's answer is a bare 400).

What uvicorn's h11 protocol does not bound, added here:

* **Header read time.** Uvicorn's keep-alive timer stops at the first byte of a request, and nothing
  bounds the time the rest of the head may take, so a client sending a byte every few seconds
  (slowloris) held its connection forever. Here a new connection, or a kept-alive one's next
  request from its first byte, must deliver its whole head within `Limits.header_timeout_s`, and
  then its body within `Limits.body_timeout_s`, or the connection is closed. (The body deadline is
  also enforced, with a 408 answer, in `limits.BoundedBodies`.)
* **Connection count.** Above `Limits.max_connections` open connections a new one is closed at once
  (uvicorn's ``limit_concurrency`` only answers 503 once a full request has arrived).

Keep-alive idle time is uvicorn's own ``timeout_keep_alive`` (`Limits.keep_alive_s`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from seqexport_dagster.service.limits import Limits


def bounded_protocol(limits: Limits) -> type[H11Protocol]:
    """An `H11Protocol` class bound to ``limits`` (uvicorn takes a class, not an instance)."""

    # Built once: an attacker's flood of big heads gets this answer thousands of times a second.
    message = f"the request line and headers are over {limits.max_header_bytes} bytes"
    body = json.dumps({"error": {"type": "too_large", "message": message}}).encode()
    refusal = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )

    class BoundedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.read_deadline: asyncio.TimerHandle | None = None
            self.reading: type[h11.IDLE] | type[h11.SEND_BODY] | None = None
            self.head_bytes = 0  # bytes of the request head received so far
            self.head_tail = b""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.close()
                return
            self._arm(h11.IDLE)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                # Count only the head: up to its blank line (which may straddle two reads). A read
                # may be 256 KB of an attacker's header: search it in place, never copy it.
                tail = self.head_tail
                edge = (tail + data[:3]).find(b"\r\n\r\n") if tail else -1
                end = edge - len(tail) if edge >= 0 else data.find(b"\r\n\r\n")
                self.head_bytes += len(data) if end < 0 and edge < 0 else max(0, end)
                self.head_tail = data[-3:] if len(data) >= 3 else (tail + data)[-3:]
                if self.head_bytes > limits.max_header_bytes and not self.transport.is_closing():
                    # h11 would answer a bare "Invalid HTTP request"; name the problem instead.
                    self._refuse_head()
                    return
            super().data_received(data)
            state = self.conn.their_state
            if self.transport.is_closing() or state is not h11.IDLE and state is not h11.SEND_BODY:
                self._disarm()  # the whole request is in (or the connection ends): the answer is the app's
            elif state is not self.reading:
                self._arm(state)  # a head began (a kept-alive connection's next request), or a body did

        def _refuse_head(self) -> None:
            self._disarm()
            self.transport.write(refusal)
            self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.head_bytes, self.head_tail = 0, b""
            self._disarm()  # uvicorn's keep-alive timer now runs until the next request's first byte

        def _arm(self, state: type[h11.IDLE] | type[h11.SEND_BODY]) -> None:
            self._disarm()
            self.reading = state
            seconds = limits.header_timeout_s if state is h11.IDLE else limits.body_timeout_s
            self.read_deadline = self.loop.call_later(seconds, self._read_timed_out)

        def _disarm(self) -> None:
            self.reading = None
            if self.read_deadline is not None:
                self.read_deadline.cancel()
                self.read_deadline = None

        def _read_timed_out(self) -> None:
            self.read_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
