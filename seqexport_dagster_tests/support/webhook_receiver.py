"""A real webhook receiver on 127.0.0.1 (a thread): it checks every signature the way the customer
docs say, can fail with a 5xx for its first N requests, and can look at the bucket when an event
arrives (``on_event``), so a test sees what a customer's receiver would see at that moment.

Hostile or odd receivers too: ``hang`` reads each request and never answers (until the receiver
closes), counting how many are held at once (``most_held``); ``answer_bytes`` pads a 2xx answer's
body to that size."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from seqexport_dagster.delivery.webhook import verify_signature


@dataclass
class Received:
    event: dict[str, Any]
    headers: dict[str, str]
    signature_ok: bool
    answered: int
    seen: Any = None  # what ``on_event`` found at receive time


@dataclass
class Receiver:
    port: int = 0
    secret: str = ""
    fail_first: int = 0
    fail_status: int = 503
    on_event: Callable[[dict[str, Any]], Any] | None = None
    hang: bool = False
    answer_bytes: int = 2
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    held: int = 0
    most_held: int = 0
    closing: threading.Event = field(default_factory=threading.Event)

    def hold(self) -> None:
        """Never answer: keep the connection until the receiver closes."""
        with self.lock:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        self.closing.wait()
        with self.lock:
            self.held -= 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/sequenzy?source=test"

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        signature_ok = bool(self.secret) and verify_signature(self.secret, headers.get("Sequenzy-Signature", ""), body)
        event = json.loads(body)
        with self.lock:
            failing = len(self.requests) < self.fail_first
            answered = self.fail_status if failing else (200 if signature_ok else 400)
            seen = self.on_event(event) if self.on_event is not None and answered == 200 else None
            self.requests.append(Received(event, headers, signature_ok, answered, seen))
        return answered

    def accepted(self, kind: str | None = None) -> list[Received]:
        """Requests answered 200, one per event id (a receiver deduplicates on it)."""
        out: dict[str, Received] = {}
        for r in self.requests:
            if r.answered == 200 and (kind is None or r.event["type"] == kind):
                out.setdefault(r.event["id"], r)
        return list(out.values())


@contextmanager
def receiver(**kwargs: Any) -> Iterator[Receiver]:
    state = Receiver(**kwargs)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if state.hang:
                state.hold()
                return
            code = state.handle({k: v for k, v in self.headers.items()}, body)
            answer = b"ok" if state.answer_bytes <= 2 else b"o" * state.answer_bytes
            self.send_response(code)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            try:
                self.wfile.write(answer)
            except OSError:
                pass  # the sender stopped reading at its cap and closed: as a real server sees it

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.closing.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
