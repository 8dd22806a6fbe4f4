"""API tokens: minted by operators, shown once, stored as a hash with a printable prefix.

A token is ``sqx_<12 hex>_<43 url-safe chars>``: the first part (``sqx_<12 hex>``) is its id, safe to
print, log and list; the rest is 256 random bits. Only the SHA-256 of the whole token is stored: a
token has full entropy, so a plain hash is as strong as a slow one and costs one microsecond per
request. A lookup is by id, then a constant-time comparison of the hashes.

Two scopes: ``account`` sees and changes one account's exports; ``operator`` sees everything.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from seqexport_dagster.errors import InvalidInput, NotFound
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.tables import api_tokens

ACCOUNT_SCOPE: Final = "account"
OPERATOR_SCOPE: Final = "operator"
_TOKEN_RE: Final = re.compile(r"^(sqx_[0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_ID_RE: Final = re.compile(r"^sqx_[0-9a-f]{12}$")


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A token as stored: never its value."""

    id: str
    account_id: str | None
    scope: str
    name: str
    created_at: int
    revoked_at: int | None

    @property
    def is_operator(self) -> bool:
        return self.scope == OPERATOR_SCOPE


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _row(r: sa.Row[tuple[object, ...]]) -> ApiToken:
    m = r._mapping
    return ApiToken(
        id=str(m["id"]),
        account_id=None if m["account_id"] is None else str(m["account_id"]),
        scope=str(m["scope"]),
        name=str(m["name"]),
        created_at=int(str(m["created_at"])),
        revoked_at=None if m["revoked_at"] is None else int(str(m["revoked_at"])),
    )


class TokenStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @translate_errors
    def create(self, *, account_id: str | None, now_ms: int, name: str = "") -> tuple[str, ApiToken]:
        """Mint a token for ``account_id`` (``None``: operator scope). Returns the value, shown once."""
        if len(name) > 128:
            raise InvalidInput("name", "use at most 128 characters")
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
                )
            )
        return value, ApiToken(token_id, account_id, scope, name, now_ms, None)

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
    def authenticate(self, value: str) -> ApiToken | None:
        """The live token with this value, or ``None`` (unknown, malformed, wrong secret, revoked)."""
        match = _TOKEN_RE.match(value or "")
        if match is None:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == match.group(1))).first()
        if row is None or not hmac.compare_digest(str(row._mapping["token_hash"]), _hash(value)):
            return None
        token = _row(row)
        return None if token.revoked_at is not None else token
