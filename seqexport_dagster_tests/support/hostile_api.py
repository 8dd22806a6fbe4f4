"""A hostile "HTTP API" on 127.0.0.1, in its own process: what the remote CLI may be pointed at.

``python -m seqexport_dagster_tests.support.hostile_api PORT MODE [ARG]``:

``record FILE``      answers ``[]`` and appends each request's method, path and headers to FILE
``redirect URL``     answers 307 to URL (the path appended) for every request
``huge``             answers 200 announcing and streaming 1 GiB of JSON
``huge-unannounced`` the same with no Content-Length (chunked)
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIB = 1024 * 1024 * 1024


def handler_for(mode: str, arg: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            try:
                if mode == "record":
                    entry = {"method": self.command, "path": self.path, "headers": dict(self.headers.items())}
                    with Path(arg).open("a") as log:
                        log.write(json.dumps(entry) + "\n")
                    self.send(200, b"[]")
                elif mode == "redirect":
                    self.send_response(307)
                    self.send_header("Location", arg.rstrip("/") + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif mode in ("huge", "huge-unannounced"):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    if mode == "huge":
                        self.send_header("Content-Length", str(GIB))
                    else:
                        self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    block = b"[" + b'"aaaaaaa",' * (1024 * 1024 // 10 - 1)
                    for _ in range(1024):
                        if mode == "huge":
                            self.wfile.write(block)
                        else:
                            self.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                else:
                    raise ValueError(mode)
            except OSError:
                self.close_connection = True  # the client hung up: what a bounded client does

        do_GET = do_POST = do_PATCH = do_DELETE = handle_any

        def send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main(argv: list[str]) -> int:
    port, mode, arg = int(argv[0]), argv[1], (argv[2] if len(argv) > 2 else "")
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(mode, arg))
    server.daemon_threads = True
    server.serve_forever()
    return 0


@dataclass(frozen=True)
class HostileApi:
    url: str


@contextmanager
def running(mode: str, arg: str = "") -> Iterator[HostileApi]:
    """The server in its own process group on a free port; stopped with its group."""
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import group_process

    port = free_port()
    command = [sys.executable, "-m", "seqexport_dagster_tests.support.hostile_api", str(port), mode, arg]
    with group_process(command, grace_s=2) as process:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the hostile API did not start") from None
                time.sleep(0.05)
        yield HostileApi(f"http://127.0.0.1:{port}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
