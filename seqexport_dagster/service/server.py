"""Run the HTTP API on uvicorn, with our access log in place of uvicorn's and bounded connections.

Uvicorn's access log prints the query string, so it is off; `app.gate` logs method, path, status,
account and duration instead. The protocol is h11 with the deadlines of `service.protocol` (never
httptools, which bounds neither header size nor count); request bodies are bounded by
`service.limits`. Opens an existing control plane only (a mistyped ``SEQEXPORT_HOME`` is an error,
not a new empty one) and migrates it first, as the CLI does.
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.management.api import Exports
from seqexport_dagster.service.app import create_app
from seqexport_dagster.service.guard import RateLimit
from seqexport_dagster.service.limits import Limits
from seqexport_dagster.service.protocol import bounded_protocol

#: Loggers the server writes to stderr: requests, API errors, and the operator-only detail of
#: refused endpoints (`destination.endpoint`: which address a name resolved to).
LOGGERS = ("seqexport.access", "seqexport.api", "seqexport.destination")


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False


def server_config(app: object, *, host: str, port: int, limits: Limits) -> uvicorn.Config:
    """Uvicorn settings for ``app`` under ``limits`` (also what the tests' in-thread server uses)."""
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        http=bounded_protocol(limits),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # a float works: call_later
        limit_concurrency=limits.max_connections,
        backlog=min(2048, limits.max_connections),
        access_log=False,
        server_header=False,
        log_level="info",
    )


def serve(settings: Settings, *, host: str, port: int, write_limit: RateLimit, limits: Limits | None = None) -> None:
    configure_logging()
    limits = limits or Limits()
    exports = Exports.from_settings(settings, must_exist=True)
    try:
        app = create_app(exports, write_limit=write_limit, limits=limits)
        uvicorn.Server(server_config(app, host=host, port=port, limits=limits)).run()
    finally:
        exports.close()
