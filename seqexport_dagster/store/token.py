"""API tokens: minted by operators, shown once, stored as a hash with a printable prefix.

A token is ``sqx_<12 hex>_<43 url-safe chars>``: the first part (``sqx_<12 hex>``) is its id, safe to
print, log and list; the rest is 256 random bits. Only the SHA-256 of the whole token is stored: a
token has full entropy, so a plain hash is as strong as a slow one and costs one microsecond per
request. A lookup is by id, then a constant-time comparison of the hashes.

Two scopes: ``account`` sees and changes one account's exports; ``operator`` sees everything.

A token may carry an expiry (``expires_at``); from then on it authenticates as nothing, like a
revoked one. Authentication records ``last_used_at``, at most once per `LAST_USED_EVERY_MS` per
token, so a busy token costs one write a minute rather than one per request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from seqexport_dagster.contract.validation import validate_account
from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS
from seqexport_dagster.errors import InvalidInput, NotFound
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.tables import api_tokens

ACCOUNT_SCOPE: Final = "account"
OPERATOR_SCOPE: Final = "operator"
_TOKEN_RE: Final = re.compile(r"^(sqx_[0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_ID_RE: Final = re.compile(r"^sqx_[0-9a-f]{12}$")
LAST_USED_EVERY_MS: Final = MINUTE_MS
MAX_LIFETIME_DAYS: Final = 3650


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A token as stored: never its value."""

    id: str
    account_id: str | None
    scope: str
    name: str
    created_at: int
    revoked_at: int | None
    expires_at: int | None = None
    last_used_at: int | None = None

    @property
    def is_operator(self) -> bool:
        return self.scope == OPERATOR_SCOPE

    def live_at(self, now_ms: int) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now_ms < self.expires_at)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _row(r: sa.Row[tuple[object, ...]]) -> ApiToken:
    m = r._mapping
    return ApiToken(
        id=str(m["id"]),
        account_id=None if m["account_id"] is None else str(m["account_id"]),
        scope=str(m["scope"]),
        name=str(m["name"]),
        created_at=int(str(m["created_at"])),
        revoked_at=_opt_int(m["revoked_at"]),
        expires_at=_opt_int(m["expires_at"]),
        last_used_at=_opt_int(m["last_used_at"]),
    )


class TokenStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @translate_errors
    def create(
        self, *, account_id: str | None, now_ms: int, name: str = "", expires_in_days: int | None = None
    ) -> tuple[str, ApiToken]:
        """Mint a token for ``account_id`` (``None``: operator scope). Returns the value, shown once.

        ``expires_in_days`` (1 to 3650): the token stops working that many days from ``now_ms``;
        ``None``: it works until revoked.
        """
        if len(name) > 128:
            raise InvalidInput("name", "use at most 128 characters")
        if account_id is not None:
            validate_account(account_id)
        expires_at = None
        if expires_in_days is not None:
            if not 1 <= expires_in_days <= MAX_LIFETIME_DAYS:
                raise InvalidInput("expires-in-days", f"use 1 to {MAX_LIFETIME_DAYS} days (or leave it out: no expiry)")
            expires_at = now_ms + expires_in_days * DAY_MS
        token_id = f"sqx_{secrets.token_hex(6)}"
        value = f"{token_id}_{secrets.token_urlsafe(32)}"
        scope = OPERATOR_SCOPE if account_id is None else ACCOUNT_SCOPE
        with self.engine.begin() as conn:
            conn.execute(
                api_tokens.insert().values(
                    id=token_id,
                    account_id=account_id,
                    scope=scope,
                    token_hash=_hash(value),
                    name=name,
                    created_at=now_ms,
                    expires_at=expires_at,
                )
            )
        return value, ApiToken(token_id, account_id, scope, name, now_ms, None, expires_at)

    @translate_errors
    def list(self, *, account_id: str | None = None, include_revoked: bool = False) -> list[ApiToken]:
        query = sa.select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id)
        if account_id is not None:
            query = query.where(api_tokens.c.account_id == account_id)
        if not include_revoked:
            query = query.where(api_tokens.c.revoked_at.is_(None))
        with self.engine.connect() as conn:
            return [_row(r) for r in conn.execute(query).all()]

    @translate_errors
    def revoke(self, token_id: str, now_ms: int) -> ApiToken:
        if not _ID_RE.match(token_id or ""):
            raise InvalidInput("token_id", f"{token_id!r} is not a token id: ids look like sqx_0123456789ab")
        with self.engine.begin() as conn:
            conn.execute(
                api_tokens.update()
                .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
                .values(revoked_at=now_ms)
            )
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == token_id)).first()
        if row is None:
            raise NotFound(f"token {token_id!r} not found")
        return _row(row)

    @translate_errors
    def authenticate(self, value: str, *, now_ms: int) -> ApiToken | None:
        """The live token with this value at ``now_ms``, or ``None`` (unknown, malformed, wrong secret,
        revoked, expired). Records the use (at most once a minute per token)."""
        match = _TOKEN_RE.match(value or "")
        if match is None:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == match.group(1))).first()
        if row is None or not hmac.compare_digest(str(row._mapping["token_hash"]), _hash(value)):
            return None
        token = _row(row)
        if not token.live_at(now_ms):
            return None
        if token.last_used_at is None or now_ms - token.last_used_at >= LAST_USED_EVERY_MS:
            t = api_tokens
            with self.engine.begin() as conn:
                conn.execute(t.update().where(t.c.id == token.id).values(last_used_at=now_ms))
        return token
