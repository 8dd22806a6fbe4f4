"""``python -m seqexport_dagster_tests.support.planted_dns NAME=ADDRESS[,NAME=ADDRESS...] ARGS...``:
the real `seqexport` CLI with ARGS, in a process whose resolver answers the planted names with the
planted addresses (every other name as usual).

What a customer's own DNS record pointing at an internal address looks like to the server: the
tests cannot rely on any name resolving to a private address on every machine, so they plant one.
Only ``socket.getaddrinfo`` is replaced; everything from the HTTP request to the connect-time check
(`destination.endpoint.ConnectGuard`) is the served code.
"""

from __future__ import annotations

import socket
import sys
from typing import Any


def plant(answers: dict[str, str]) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if isinstance(name, str) and name.lower().rstrip(".") in answers:
            return real(answers[name.lower().rstrip(".")], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def main(argv: list[str]) -> int:
    plant(dict(pair.split("=", 1) for pair in argv[0].split(",")))
    from seqexport_dagster.cli import main as cli_main

    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
