"""Exit codes: what each one means, and which errors of our tree end in which.

Stable: scripts rely on them, and `EXIT_CODES_HELP` (the end of ``seqexport --help``) documents them.
"""

from __future__ import annotations

from typing import Final

from seqexport_dagster.errors import (
    ConfigurationError,
    ConflictError,
    ConnectionTestFailed,
    EndpointRefused,
    ExportError,
    InvalidInput,
    NotFound,
    RateLimited,
    ResponseTooLarge,
    RetryableError,
    SecretKeyError,
    internal_error,
)

EXIT_OK: Final = 0
EXIT_INTERNAL: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_CONFLICT: Final = 4
EXIT_CONNECTION: Final = 5
EXIT_UNAVAILABLE: Final = 6
EXIT_VERIFY_FAILED: Final = 7
EXIT_RATE_LIMITED: Final = 8

EXIT_CODES_HELP: Final = """\
exit codes (stable; scripts may rely on them):
  0  ok
  1  internal error (a bug: please report it)
  2  bad input: a value is wrong or missing; the message names the field and what is accepted
  3  not found: no export with that id
  4  conflict: not possible in the export's current state (deleted, paused, dataset already there,
     export-now with nothing to export yet: the message says when it can)
  5  connection test failed: the store refused or did not answer the test write; nothing was saved
  6  unavailable: the control-plane database is missing (`seqexport init` creates it) or away, or the
     credential keys (SEQEXPORT_SECRET_KEYS) are not usable; remotely: the API is unreachable, refused
     the token, asks to retry later or sent an answer past the CLI's bound
     (rotate-keys: some stored secrets did not open; each is listed, the others were re-sealed)
  7  verify found problems in the bucket (the report lists each one)
  8  rate limited: too many connection tests for this account recently; the message says when to retry

Every command takes --json (before or after the command name): results go to stdout as JSON,
errors as {"error": {...}}. Progress goes to stderr. Secrets are never printed.
configuration: SEQEXPORT_DATABASE_URL, SEQEXPORT_SECRET_KEYS, SEQEXPORT_HOME, SEQEXPORT_ALLOW_LOCAL
remote: with SEQEXPORT_API_URL and SEQEXPORT_API_TOKEN set, the management commands call the HTTP API
"""


#: Our error tree as (type, exit code), most specific first: the first type the error is wins.
ERROR_EXITS: Final[tuple[tuple[type[ExportError], str, int], ...]] = (
    (ConnectionTestFailed, "connection_test_failed", EXIT_CONNECTION),
    (InvalidInput, "invalid_input", EXIT_BAD_INPUT),
    (EndpointRefused, "invalid_input", EXIT_BAD_INPUT),
    (NotFound, "not_found", EXIT_NOT_FOUND),
    (ConflictError, "conflict", EXIT_CONFLICT),
    (RateLimited, "rate_limited", EXIT_RATE_LIMITED),
    (RetryableError, "unavailable", EXIT_UNAVAILABLE),
    (ResponseTooLarge, "unavailable", EXIT_UNAVAILABLE),
    (SecretKeyError, "unavailable", EXIT_UNAVAILABLE),
    (ConfigurationError, "unavailable", EXIT_UNAVAILABLE),
    (ExportError, "error", EXIT_INTERNAL),
)


def exit_for(exc: ExportError) -> tuple[str, int]:
    """The error's kind (the ``type`` of ``--json``'s error) and exit code, from `ERROR_EXITS`."""
    return next((kind, code) for cls, kind, code in ERROR_EXITS if isinstance(exc, cls))


def error_field(exc: ExportError) -> str | None:
    """The field an input error names (``--json``'s ``error.field``)."""
    if isinstance(exc, InvalidInput):
        return exc.field
    return "endpoint" if isinstance(exc, EndpointRefused) else None


def internal_message(exc: BaseException) -> str:
    """A bug's one line (`internal_error`: type and place only), asking for a report."""
    return f"{internal_error(exc)}; please report it"
