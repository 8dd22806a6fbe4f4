"""The `seqexport` command line. It only parses and prints; the work is done by the core and the API.

Every management command is a thin call into `seqexport_dagster.management.api.Exports`, so the dashboard, the
CLI and scripts share one implementation. Inside: `parser` (arguments and help), `commands` (export
management), `tools` (demo, verify, tokens, serve, backfill), `render` (what is printed), `exits`
(exit codes and which error ends in which) and `app` (`main`, which ties them together).
"""

from __future__ import annotations

from seqexport_dagster.cli.app import main
from seqexport_dagster.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_INTERNAL,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_RATE_LIMITED,
    EXIT_UNAVAILABLE,
    EXIT_VERIFY_FAILED,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CONFLICT",
    "EXIT_CONNECTION",
    "EXIT_INTERNAL",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_RATE_LIMITED",
    "EXIT_UNAVAILABLE",
    "EXIT_VERIFY_FAILED",
    "main",
]
