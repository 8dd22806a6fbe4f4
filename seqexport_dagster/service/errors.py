"""Our error tree as HTTP answers, at one boundary. Bodies carry a message and never a traceback,
a secret or SQL: the messages are the error tree's own (already in the customer's words), and
anything outside the tree is answered with its type's name only.

``InvalidInput`` → 400 ``{"error": {"type", "field", "message"}}``; ``NotFound`` → 404;
``ConflictError`` → 409; a failed connection test → 422; too many writes → 429; the control plane
or the credential keys unavailable → 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

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
from seqexport_dagster.service.body import accepted

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
    if isinstance(exc, RateLimited):  # per-account limits (store.rate_limit) and the pending-delivery cap
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


#: Where a value came from (not part of its name), and pydantic's names for the members of a union
#: (``datasets.list[str]``), which are types, not fields.
_PLACES: Final = frozenset({"body", "query", "path", "header", "cookie"})
_UNION_MEMBER: Final = re.compile(r"^(str|int|float|bool|bytes|dict|list|none)$|[\[\]]")
#: "Input should be a valid list" → "a list".
_SHOULD_BE: Final = re.compile(r"^Input should be (?:a valid )?(.+?)(?:,.*)?$")


def _kind(value: object) -> str:
    """The JSON type of what was sent, never the value itself (it could be a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object"


def _name(loc: Sequence[Any]) -> str:
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part not in _PLACES and not _UNION_MEMBER.search(str(part)):
            name += ("." if name else "") + str(part)
    return name or "body"


def _wanted(error: Mapping[str, Any]) -> str:
    match = _SHOULD_BE.match(str(error.get("msg", "")))
    if match:
        wanted = match[1]
        if wanted.split()[0] in ("a", "an", "true", "false"):
            return wanted
        return f"{'an' if wanted[0] in 'aeiou' else 'a'} {wanted}"
    return str(error.get("msg", "a valid value")).lower()


def validation_message(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """``(field, message)`` for FastAPI's request validation errors, in the customer's terms: the
    field by its name (``datasets``, ``add[0]``; never a character offset or a union member), what
    was sent by its JSON type only, and what is accepted."""
    if not errors:
        return "body", "body: the request is not valid; send one JSON object"
    first = errors[0]
    kind = str(first.get("type", ""))
    loc = tuple(first.get("loc", ("body",)))
    if kind == "json_invalid":
        where = loc[-1] if loc and isinstance(loc[-1], int) else None
        reason = str((first.get("ctx") or {}).get("error", "not JSON"))
        at = f" at character {where}" if where is not None else ""
        return "body", f"body: not valid JSON ({reason}{at}): send one complete JSON object"
    field = _name(loc)
    if field == "body" and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "body", f"body: must be a JSON object, got {_kind(first.get('input'))}"
    if kind == "missing" and field == "body":
        return "body", "body: missing: send one JSON object"
    if kind == "missing":
        hint = accepted(field.split(".")[-1])
        return field, f"{field}: required" + (f" ({hint})" if hint else "")
    ctx = first.get("ctx") or {}
    if kind in ("string_too_long", "too_long") and "max_length" in ctx:
        # A secret is a SecretStr, whose length pydantic counts as "items": it is characters.
        unit = "characters" if kind == "string_too_long" or "secret" in field else "items"
        return field, f"{field}: at most {ctx['max_length']} {unit}"
    if kind == "extra_forbidden":
        return field, f"{field}: not a field of this request (see /openapi.json for the fields accepted)"
    # Every alternative of a union fails at the same field: together they are what is accepted.
    alternatives = [e for e in errors if _name(tuple(e.get("loc", ()))) == field]
    described = accepted(field) if "." not in field and "[" not in field else None
    wanted = " or ".join(dict.fromkeys(_wanted(e) for e in alternatives))
    if described:
        # A union's description is the list of what it accepts; a plain field's says what it is for.
        wanted = described if len(alternatives) > 1 else f"{wanted} ({described})"
    return field, f"{field}: got {_kind(first.get('input'))}; accepted: {wanted}"


def validation_response(errors: Sequence[Mapping[str, Any]]) -> JSONResponse:
    """A 400 for a request FastAPI could not read into its model (see `validation_message`)."""
    field, message = validation_message(errors)
    return error_response(400, "invalid_input", message, field)
