"""One deadline per ``put``, whatever phase a request is in (lookup, connect, TLS, upload, answer).

Per-read timeouts cannot bound a request: a store that sends one byte a second never lets a read
time out. A `Watch` is current on the sending thread for the length of one request; when its
deadline passes, one watchdog thread per process shuts the request's sockets down, and the blocked
read or write fails at once. `seqexport_dagster.destination.s3_transport` registers the sockets.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from seqexport_dagster.destination.endpoint import Resolver


class Watch:
    """Ends one request at its deadline, in whatever phase it is (connect, TLS, upload, answer).

    Per-read timeouts cannot do this: a store that sends one byte a second never lets a read time
    out. So when the deadline passes, `watchdog` shuts the request's sockets down; the blocked read
    or write then fails at once, and `PinnedSender` reports `EndpointTooSlow`. The sockets are the
    ones the pinned connections open or reuse while the watch is current on this thread.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + max(seconds, 0.0)
        self.expired = False
        self.done = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._connections: list[Any] = []

    def __enter__(self) -> Watch:
        current.watch = self
        watchdog.arm(self)
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self.done = True  # the watchdog drops it lazily; its sockets are no longer ours to shut
        current.watch = None

    def add_socket(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shutdown(sock)

    def add_connection(self, conn: Any) -> None:
        with self._lock:
            self._connections.append(conn)
            if self.expired:
                _shutdown(getattr(conn, "sock", None))

    def fire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.expired = True
            for sock in [*self._sockets, *(getattr(c, "sock", None) for c in self._connections)]:
                _shutdown(sock)


class Watchdog:
    """One thread per process fires every `Watch` whose deadline has passed.

    Cheaper than a timer thread per request (a thread start costs about 1.5 ms, a PUT on a fast
    network a few). Finished watches stay queued until their deadline or the next compaction.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._pid = 0

    def arm(self, watch: Watch) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: the parent's thread is not here
                self._pid = os.getpid()
                self._queue = []
                threading.Thread(target=self._run, name="seqexport-put-deadlines", daemon=True).start()
            if len(self._queue) > 4096:
                self._queue = [entry for entry in self._queue if not entry[2].done]
                heapq.heapify(self._queue)
            heapq.heappush(self._queue, (watch.at, next(self._order), watch))
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._queue and (self._queue[0][2].done or self._queue[0][0] <= now):
                    _, _, watch = heapq.heappop(self._queue)
                    watch.fire()
                self._cond.wait(self._queue[0][0] - now if self._queue else None)


watchdog = Watchdog()
current = threading.local()


def watching() -> Watch | None:
    watch: Watch | None = getattr(current, "watch", None)
    return watch


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        # The plain socket's shutdown even for TLS: SSLSocket.shutdown would also drop its SSL
        # object under the reading thread's feet.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def bounded_resolver(resolver: Resolver) -> Resolver:
    """``resolver`` within the current request's deadline.

    A name lookup cannot be interrupted like a socket, and the customer's DNS may answer slowly on
    purpose. So under a `Watch` the lookup runs on a helper thread and the request stops waiting
    for it when the deadline passes (the thread ends when the system resolver gives up). Only new
    connections look names up; a reused connection costs nothing here.
    """

    def resolve(host: str, port: int) -> Sequence[str]:
        watch = watching()
        if watch is None:
            return resolver(host, port)
        result: list[Sequence[str]] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def lookup() -> None:
            try:
                result.append(resolver(host, port))
            except BaseException as exc:  # handed to the waiting thread as is
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=lookup, name="seqexport-resolve", daemon=True).start()
        if not done.wait(max(watch.at - time.monotonic(), 0.0)):
            watch.fire()
            raise TimeoutError(f"looking up {host} did not finish within the request's deadline")
        if failure:
            raise failure[0]
        return result[0]

    return resolve


class Budget:
    """Sets (and clears) the put deadline on the sending thread."""

    def __init__(self, slot: threading.local, until: float) -> None:
        self._slot = slot
        self._until = until

    def __enter__(self) -> None:
        self._slot.until = self._until

    def __exit__(self, *_: object) -> None:
        self._slot.until = None
