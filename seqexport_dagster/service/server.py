"""Run the HTTP API on uvicorn, with our access log in place of uvicorn's.

Uvicorn's access log prints the query string, so it is off; `app.gate` logs method, path, status,
account and duration instead. Migrates the control plane first (as the CLI does).
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from seqexport_dagster.api import Exports
from seqexport_dagster.config import Settings
from seqexport_dagster.service.app import create_app
from seqexport_dagster.service.guard import RateLimit


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in ("seqexport.access", "seqexport.api"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False


def serve(settings: Settings, *, host: str, port: int, write_limit: RateLimit) -> None:
    configure_logging()
    exports = Exports.from_settings(settings)
    try:
        app = create_app(exports, write_limit=write_limit)
        uvicorn.run(app, host=host, port=port, access_log=False, server_header=False, log_level="info")
    finally:
        exports.close()
