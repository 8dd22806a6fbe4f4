"""Our error tree as HTTP answers, at one boundary. Bodies carry a message and never a traceback,
a secret or SQL: the messages are the error tree's own (already in the customer's words), and
anything outside the tree is answered with its type's name only.

``InvalidInput`` → 400 ``{"error": {"type", "field", "message"}}``; ``NotFound`` → 404;
``ConflictError`` → 409; a failed connection test → 422; too many writes → 429; the control plane
or the credential keys unavailable → 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from typing import Final

from fastapi.responses import JSONResponse

from seqexport_dagster.errors import (
    ConfigurationError,
    ConflictError,
    ConnectionTestFailed,
    EndpointRefused,
    ExportError,
    InvalidInput,
    NotFound,
    RateLimited,
    RetryableError,
    SecretKeyError,
    TooManyRequests,
    Unauthorized,
    sanitize_error,
)

RETRY_AFTER_S: Final = 5
log = logging.getLogger("seqexport.api")


def error_response(status: int, kind: str, message: str, field: str | None = None, **headers: str) -> JSONResponse:
    detail: dict[str, str] = {"type": kind, "message": sanitize_error(message)}
    if field:
        detail["field"] = field
    return JSONResponse({"error": detail}, status_code=status, headers=headers or None)


def unauthorized() -> JSONResponse:
    err = Unauthorized()
    return error_response(401, "unauthorized", err.message, **{"WWW-Authenticate": "Bearer"})


def unavailable() -> JSONResponse:
    return error_response(
        503,
        "unavailable",
        f"the control plane is briefly unavailable; retry in {RETRY_AFTER_S} s",
        **{"Retry-After": str(RETRY_AFTER_S)},
    )


def to_response(exc: BaseException) -> JSONResponse:
    if isinstance(exc, InvalidInput):
        return error_response(400, "invalid_input", exc.message, exc.field)
    if isinstance(exc, EndpointRefused):
        return error_response(400, "invalid_input", exc.message, "endpoint")
    if isinstance(exc, NotFound):
        return error_response(404, "not_found", exc.message)
    if isinstance(exc, ConflictError):
        return error_response(409, "conflict", exc.message)
    if isinstance(exc, ConnectionTestFailed):
        return error_response(422, "connection_test_failed", exc.message)
    if isinstance(exc, TooManyRequests):
        return error_response(429, "rate_limited", exc.message, **{"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, RateLimited):  # the per-account connection-test limit (store.rate_limit)
        retry_after = str(max(1, -(-exc.retry_after_ms // 1000)))
        return error_response(429, "rate_limited", exc.message, **{"Retry-After": retry_after})
    if isinstance(exc, Unauthorized):
        return unauthorized()
    if isinstance(exc, RetryableError | SecretKeyError | ConfigurationError):
        # The database's own words may name hosts or carry SQL: the log gets the type, the body a fixed text.
        log.warning("control plane unavailable: %s", type(exc).__name__)
        return unavailable()
    if isinstance(exc, ExportError):
        return error_response(500, "error", exc.message)
    log.error("internal error %s", type(exc).__name__)
    return error_response(500, "internal", f"internal error {type(exc).__name__}; please report it")
