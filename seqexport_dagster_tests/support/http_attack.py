"""Hostile HTTP clients on raw sockets, for the server-hardening tests and `benchmarks.http_attack`.

Each attack speaks HTTP/1.1 by hand (httpx would refuse to send most of them) to a server on
127.0.0.1 and reports what the server did: its status line, how long it took, how much the
client managed to send before the server answered or closed. Nothing here waits forever: every
socket has a timeout.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

MB = 1024 * 1024


@dataclass(frozen=True)
class Outcome:
    """What the server did with one hostile request."""

    status: int | None  # None: it closed without answering
    seconds: float
    sent: int  # bytes of the request the client got out before the answer or the close
    head: str = ""  # the answer's status line and headers
    body: str = ""

    @property
    def closed(self) -> bool:
        return "connection: close" in self.head.lower() or self.status is None


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _read_answer(sock: socket.socket) -> tuple[int | None, str, str]:
    """Status, head and body (up to its Content-Length, or 64 KB) of the answer."""
    data = b""
    with suppress(OSError):
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    head = raw_head.decode("latin-1")
    length = next(
        (
            int(v)
            for k, _, v in (line.partition(":") for line in head.split("\r\n")[1:])
            if k.strip().lower() == "content-length" and v.strip().isdigit()
        ),
        0,
    )
    with suppress(OSError):
        while len(body) < min(length, 65536):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    try:
        return int(head.split(" ", 2)[1]), head, body.decode("utf-8", "replace")
    except (IndexError, ValueError):
        return None, head, ""


def _ready_to_read(sock: socket.socket) -> bool:
    import select

    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def send_stream(url: str, head: bytes, body: Iterator[bytes], *, timeout: float = 60.0) -> Outcome:
    """Send ``head`` then ``body`` chunk by chunk, stopping as soon as the server answers or closes."""
    started = time.perf_counter()
    sent = 0
    with socket.create_connection(address(url), timeout=timeout) as sock:
        try:
            sock.sendall(head)
            sent += len(head)
            for chunk in body:
                if _ready_to_read(sock):
                    break
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server closed on us: its answer, if any, is already in the buffer
        status, answer, body_text = _read_answer(sock)
    return Outcome(status, time.perf_counter() - started, sent, answer, body_text)


def zeros(total: int, chunk: int = MB) -> Iterator[bytes]:
    block = b"0" * chunk
    left = total
    while left > 0:
        yield block[: min(chunk, left)]
        left -= chunk


def big_body(url: str, token: str | None, size: int, *, chunked: bool = False, path: str = "/v1/exports") -> Outcome:
    """POST a JSON-ish body of ``size`` bytes, declared (Content-Length) or chunked."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    framing = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n"
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n{framing}\r\n".encode()
    body = zeros(size)
    if chunked:
        body = (b"%x\r\n%s\r\n" % (len(c), c) for c in zeros(size))
    return send_stream(url, head, body)


def big_header(url: str, size: int, path: str = "/healthz") -> Outcome:
    """One header of ``size`` bytes."""
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode()
    return send_stream(url, head, iter([*zeros(size, 256 * 1024), b"\r\n\r\n"]))


def many_headers(url: str, count: int, path: str = "/healthz") -> Outcome:
    lines = b"".join(b"X-%d: 1\r\n" % i for i in range(count))
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode()
    return send_stream(url, head, iter([lines[i : i + 65536] for i in range(0, len(lines), 65536)] + [b"\r\n"]))


def raw_request(url: str, request: bytes, timeout: float = 30.0) -> Outcome:
    return send_stream(url, request, iter(()), timeout=timeout)


@dataclass
class Slowloris:
    """``count`` connections that each send a request head one header line every ``interval`` seconds.

    With ``reconnect`` a connection the server closes is replaced at once, so ``count`` stay open
    (the benchmark's steady attack); `lifetimes` records how long each closed one was held.
    """

    url: str
    count: int
    interval: float = 1.0
    reconnect: bool = False
    sockets: list[socket.socket] = field(default_factory=list)
    lifetimes: list[float] = field(default_factory=list)
    _opened: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    @staticmethod
    def _closed(sock: socket.socket) -> bool:
        """Whether the server has ended ``sock`` (EOF, an answer, or an error)."""
        try:
            sock.setblocking(False)
            try:
                sock.recv(1024)
            except BlockingIOError:
                return False
            return True  # EOF, or it answered (a 4xx): this connection is over for the attack
        except OSError:
            return True

    def open_count(self) -> int:
        """Connections the server has not closed yet."""
        return sum(1 for sock in self.sockets if not self._closed(sock))

    _PREFIX = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(address(self.url), timeout=5)
        sock.sendall(self._PREFIX)
        self._opened[id(sock)] = time.monotonic()
        return sock

    def _drip(self) -> None:
        n = 0
        while not self._stop.wait(self.interval):
            for i, sock in enumerate(self.sockets):
                if self.reconnect and self._closed(sock):
                    self.lifetimes.append(time.monotonic() - self._opened.pop(id(sock), time.monotonic()))
                    sock.close()
                    with suppress(OSError):
                        self.sockets[i] = self._connect()
                    continue
                with suppress(OSError):
                    sock.setblocking(True)
                    sock.settimeout(0.5)
                    sock.sendall(b"X-%d: y\r\n" % n)
            n += 1

    @contextmanager
    def running(self) -> Iterator[Slowloris]:
        for _ in range(self.count):
            self.sockets.append(self._connect())
        dripper = threading.Thread(target=self._drip, daemon=True)
        dripper.start()
        try:
            yield self
        finally:
            self._stop.set()
            dripper.join(timeout=10)
            for sock in self.sockets:
                sock.close()


def healthz_latencies(
    url: str, seconds: float, stop: threading.Event | None = None, path: str = "/healthz"
) -> list[float]:
    """Sequential ``GET /healthz`` (or ``path``; one kept-alive client, reconnecting when the server
    closes) for ``seconds``: each latency in ms; a failed request counts as 60 s."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    with httpx.Client(timeout=10, trust_env=False) as client:
        while time.perf_counter() < deadline and not (stop and stop.is_set()):
            started = time.perf_counter()
            try:
                ok = client.get(f"{url}{path}").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((time.perf_counter() - started) * 1000 if ok else 60_000.0)
            time.sleep(0.02)
    return latencies


def p99(latencies: list[float]) -> float:
    if len(latencies) < 2:
        return latencies[0] if latencies else 0.0
    return statistics.quantiles(latencies, n=100, method="inclusive")[98]


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MB, from /proc."""
    now = peak = 0.0
    with suppress(OSError), open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, peak
