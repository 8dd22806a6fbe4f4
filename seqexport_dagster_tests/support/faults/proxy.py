"""A fault-injecting HTTP proxy on 127.0.0.1, in front of a real moto server.

The exporter talks to the proxy exactly as it talks to any S3-compatible endpoint (an
``http://127.0.0.1:PORT`` endpoint, allowed by ``OperatorPolicy(allow_local=True)``), so every fault
travels the real path: urllib3 sockets, botocore's parser and retry mode, our error translation.
A proxy rather than botocore event hooks because hooks run above the transport and cannot produce a
reset in the middle of an upload or a socket that stays silent past the read timeout.

Faults are rules added per test. Each rule matches requests (method, a substring of the path), fires
a number of times (or until removed, or with a probability), and does one thing:

``status``  answer with an S3 error document (503 SlowDown, 500 InternalError, 400 RequestTimeout,
            403 AccessDenied, 403 RequestTimeTooSkewed) without forwarding;
``reset``   read part of the body, then close the socket with an RST;
``delay``   wait, then forward (past the client's read timeout it becomes a timeout);
``call``    run a callback (take a database away, kill a worker), then forward;
``lost``    forward, then reset the client's connection: the object lands, the answer is lost.

Write-once: the proxy remembers every key a PUT created (and forgets one a DELETE through it
removed: the bucket's owner may delete, the writer's key never does) and counts each PUT without a create-only
precondition to a key that exists (``overwrites``: write-once delivery must keep it at 0). With
``write_once=True`` it also behaves as GCS's Storage Object Creator role (or S3 Object Lock, or a
create-only bucket policy) does: such a PUT gets 403 AccessDenied, and one that carries the
precondition (``If-None-Match: *`` or ``x-goog-if-generation-match: 0``) gets 412.

Every request is logged in order with the fault it met and the headers it arrived with, so a test
can count attempts, check the order of writes (``_SUCCESS`` after every part) and read what went on
the wire (encryption headers, the credential that signed it).

``gate``, when set, judges each request the store itself would judge on something moto does not
model (S3 asking KMS for a data key as the writer): it returns ``(status, code, message)`` to refuse
the request as the store would, or None to forward it.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te"})


@dataclass
class Fault:
    kind: str  # status | reset | delay | call
    match: str = ""  # substring of the request path (the bucket/key), "" matches all
    method: str = "PUT"
    times: int | None = 1  # None: until removed
    probability: float = 1.0
    status: int = 0
    code: str = ""
    message: str = ""
    delay_s: float = 0.0
    callback: Callable[[], None] | None = None
    fired: int = 0

    def matches(self, method: str, path: str, rng: random.Random) -> bool:
        if self.method not in ("*", method) or self.match not in path:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        return self.probability >= 1.0 or rng.random() < self.probability


@dataclass(frozen=True)
class Record:
    """One request as the proxy saw it."""

    at: float
    method: str
    path: str
    status: int  # 0: the connection was reset
    fault: str | None
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def _xml_error(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
    ).encode()


def slow_down(**kw: Any) -> Fault:
    return Fault("status", status=503, code="SlowDown", message="Please reduce your request rate.", **kw)


def internal_error(**kw: Any) -> Fault:
    return Fault("status", status=500, code="InternalError", message="We encountered an internal error.", **kw)


def request_timeout(**kw: Any) -> Fault:
    message = "Your socket connection to the server was not read from or written to within the timeout period."
    return Fault("status", status=400, code="RequestTimeout", message=message, **kw)


def access_denied(**kw: Any) -> Fault:
    kw.setdefault("times", None)
    return Fault("status", status=403, code="AccessDenied", message="Access Denied", **kw)


def clock_skewed(**kw: Any) -> Fault:
    message = "The difference between the request time and the current time is too large."
    return Fault("status", status=403, code="RequestTimeTooSkewed", message=message, **kw)


def reset(**kw: Any) -> Fault:
    return Fault("reset", **kw)


def delay(seconds: float, **kw: Any) -> Fault:
    return Fault("delay", delay_s=seconds, **kw)


def call(callback: Callable[[], None], **kw: Any) -> Fault:
    return Fault("call", callback=callback, **kw)


def lost_reply(**kw: Any) -> Fault:
    return Fault("lost", **kw)


def _has_precondition(headers: Any) -> bool:
    return headers.get("If-None-Match") == "*" or headers.get("x-goog-if-generation-match") == "0"


class FaultProxy:
    """Forwards to ``upstream_port`` on 127.0.0.1, applying the faults currently installed."""

    def __init__(self, upstream_port: int, *, seed: int = 0, write_once: bool = False) -> None:
        self.upstream_port = upstream_port
        self.write_once = write_once
        self.existing: set[str] = set()  # paths a PUT created
        #: The store behind answers a PUT to an existing key itself (Azurite: 409 BlobAlreadyExists, or
        #: 403 under a create-only SAS): such PUTs are still counted, but forwarded, not answered here.
        self.store_answers_existing = False
        self.overwrites: list[str] = []  # PUTs without the precondition to a path that exists
        self.precondition_hits: list[str] = []  # PUTs with the precondition to a path that exists
        self.faults: list[Fault] = []
        self.log: list[Record] = []
        self.errors: list[Exception] = []
        self.in_flight = 0
        self.gate: Callable[[str, str, Any], tuple[int, str, str] | None] | None = None
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self.faults:
                self.faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def puts(self, contains: str = "") -> list[Record]:
        with self._lock:
            return [r for r in self.log if r.method == "PUT" and contains in r.path]

    def put_keys_in_order(self, bucket: str) -> list[str]:
        """Keys of the PUTs that reached the store successfully, in arrival order."""
        head = f"/{bucket}/"
        return [unquote(r.path[len(head) :]) for r in self.puts(head) if r.status == 200]

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until no request is being handled (a killed client's last PUT may still be landing)."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _pick(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path, self._rng):
                    fault.fired += 1
                    return fault
        return None

    def _record(self, method: str, path: str, status: int, fault: Fault | None, headers: Any = None) -> None:
        label = None
        if fault is not None:
            label = fault.code or fault.kind
        seen = tuple(headers.items()) if headers is not None else ()
        with self._lock:
            self.log.append(Record(time.monotonic(), method, path, status, label, seen))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Broken pipes after a reset or a client timeout are the point of this server; stay quiet
        # (an unhandled thread exception would also fail the test run, warnings being errors).
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in separate writes; with Nagle on, the second waits for the
        # client's delayed ACK (40 ms a request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_PUT(self) -> None:
        self._handle()

    do_GET = do_POST = do_HEAD = do_DELETE = do_PUT

    def _handle(self) -> None:
        proxy = self.server.proxy
        with proxy._lock:
            proxy.in_flight += 1
        try:
            self._forward(proxy)
        finally:
            with proxy._lock:
                proxy.in_flight -= 1

    def _forward(self, proxy: FaultProxy) -> None:
        method = self.command
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        fault = proxy._pick(method, path)
        if fault is not None and fault.kind == "reset":
            self.rfile.read(length // 2)
            proxy._record(method, path, 0, fault)
            # SO_LINGER 0: close() sends an RST instead of a FIN, as a dying load balancer does.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else b""
        if method == "PUT" and self._refused_as_existing(proxy, path):
            return
        refusal = proxy.gate(method, path, self.headers) if proxy.gate is not None else None
        if refusal is not None:
            fault = Fault("status", status=refusal[0], code=refusal[1], message=refusal[2])
        if fault is not None and fault.kind == "status":
            payload = _xml_error(fault.code, fault.message)
            proxy._record(method, path, fault.status, fault, self.headers)
            self.send_response_only(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay_s)
        if fault is not None and fault.kind == "call" and fault.callback is not None:
            try:
                fault.callback()
            except Exception as exc:  # the test reads proxy.errors; a dead handler thread would hide it
                proxy.errors.append(exc)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
        try:
            upstream.request(method, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            status = response.status
            reply_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
        finally:
            upstream.close()
        if method == "PUT" and 200 <= status < 300:
            with proxy._lock:
                proxy.existing.add(path)
        if method == "DELETE" and 200 <= status < 300:  # the bucket's owner removed it: creatable again
            with proxy._lock:
                proxy.existing.discard(path)
        proxy._record(method, path, status, fault, self.headers)
        if fault is not None and fault.kind == "lost":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.send_response_only(status)
        for k, v in reply_headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(payload)

    def _refused_as_existing(self, proxy: FaultProxy, path: str) -> bool:
        """Count (and, write-once, refuse) a PUT to a key that exists. True if answered here."""
        conditional = _has_precondition(self.headers)
        with proxy._lock:
            exists = path in proxy.existing
            if exists:
                (proxy.precondition_hits if conditional else proxy.overwrites).append(path)
        if not exists or not (proxy.write_once or conditional) or proxy.store_answers_existing:
            return False
        status, code, message = (
            (412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
            if conditional
            else (403, "AccessDenied", "Access denied: the object exists and this key may not overwrite it")
        )
        payload = _xml_error(code, message)
        proxy._record("PUT", path, status, None, self.headers)
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        return True


__all__ = [
    "Fault",
    "FaultProxy",
    "Record",
    "access_denied",
    "call",
    "clock_skewed",
    "delay",
    "internal_error",
    "lost_reply",
    "request_timeout",
    "reset",
    "slow_down",
]
