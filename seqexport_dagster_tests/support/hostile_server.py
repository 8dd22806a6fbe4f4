"""A hostile S3 endpoint on 127.0.0.1, in its own process: what a customer's server could answer.

``python -m seqexport_dagster_tests.support.hostile_server PORT MODE_FILE``. Each request reads its mode
from ``MODE_FILE`` (so a test switches modes without restarting), consumes the request, then:

``ok``        200, empty body: a store that accepts the PUT
``huge``      200 announcing 400 MB and streaming it as fast as the client reads
``drip``      the whole answer, status line included, one byte a second
``dripbody``  a 400 whose headers come at once and whose 100 KB body comes one byte a second
``stall``     reads the request and never answers
``bigerror``  400 with a 5 MB S3 error XML whose message is full of control characters
``ctlerror``  400 with a 3 KB S3 error message with newlines, terminal escapes, bidi overrides
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HUGE = 400 * 1024 * 1024
NASTY = "line one\nline two\r\n\x1b[31mred\x1b[0m \x00nul \u202eevil\u202c \x07bell\t"
# What survives an XML parser: C0 controls other than tab and newlines are not XML, but C1 controls
# (0x9b is the 8-bit "escape [" of terminals), line separators and bidi overrides are.
NASTY_XML = "line one\nline two\r\n\x9b31mred\x9b0m \u202eevil\u202c \u2028sep\x85nel\t"


def error_xml(message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>HostileError</Code>'
        f"<Message>{message}</Message><RequestId>r1</RequestId></Error>"
    ).encode()


def read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    expect = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"expect":
            expect = True
    if expect:
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        body += chunk
    return True


def answer(conn: socket.socket, mode: str) -> None:
    if mode == "ok":
        conn.sendall(b'HTTP/1.1 200 OK\r\nETag: "x"\r\nContent-Length: 0\r\n\r\n')
    elif mode == "huge":
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {HUGE}\r\n\r\n".encode())
        block = b"x" * 65536
        for _ in range(HUGE // len(block)):
            conn.sendall(block)
    elif mode == "drip":
        for byte in b'HTTP/1.1 200 OK\r\nETag: "x"\r\nContent-Length: 0\r\n\r\n':
            conn.sendall(bytes([byte]))
            time.sleep(1.0)
    elif mode == "dripbody":
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 100000\r\n\r\n")
        while True:
            conn.sendall(b"x")
            time.sleep(1.0)
    elif mode == "stall":
        time.sleep(3600)  # accepts the upload, never answers
    elif mode in ("bigerror", "ctlerror"):
        size = 5 * 1024 * 1024 if mode == "bigerror" else 3 * 1024
        nasty = NASTY if mode == "bigerror" else NASTY_XML
        message = (nasty * (size // len(nasty) + 1))[:size]
        body = error_xml(message)
        conn.sendall(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/xml\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    else:
        raise ValueError(mode)


def serve(conn: socket.socket, mode_file: Path) -> None:
    with conn:
        try:
            while read_request(conn):
                answer(conn, mode_file.read_text().strip())
        except OSError:
            pass  # the client hung up: that is what a bounded client does


def main(argv: list[str]) -> int:
    port, mode_file = int(argv[0]), Path(argv[1])
    server = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, mode_file), daemon=True).start()


@dataclass(frozen=True)
class HostileServer:
    endpoint: str
    mode_file: Path

    def set_mode(self, mode: str) -> None:
        self.mode_file.write_text(mode)


@contextmanager
def running(folder: Path) -> Iterator[HostileServer]:
    """The server in its own process group on a free port, in mode ``ok``; stopped with its group."""
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import group_process

    port = free_port()
    server = HostileServer(f"http://127.0.0.1:{port}", folder / "hostile-mode")
    server.set_mode("ok")
    command = [sys.executable, "-m", "seqexport_dagster_tests.support.hostile_server", str(port), str(server.mode_file)]
    with group_process(command, grace_s=2) as process:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the hostile server did not start") from None
                time.sleep(0.05)
        yield server


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
