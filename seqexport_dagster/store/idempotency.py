"""Idempotency-Key results: a repeated request within 24 hours gets the first answer again.

The key is claimed (a row with no answer yet) before the operation runs, in its own transaction;
the primary key (caller, key) makes a second, concurrent claim fail, so two requests with one key
can never both create an export. A successful answer is stored with the claim. A failed one
releases the claim, so the caller may retry with the same key once the cause is fixed (a failed
connection test, for example). Keys are scoped to the caller's namespace (``account:<id>`` or
``operator:``, `tenancy.Caller.namespace`), and the fingerprint is the caller's keyed digest
(`service.guard.fingerprint`): this store never sees a request body or a secret.

Keys are kept 24 h (`KEEP_MS`). Each claim deletes the expired ones it meets (an indexed range),
and `prune` is the same deletion for a maintenance job (`seqexport maintain`), so a server that
takes no keys for a while still leaves none older than a day once maintenance has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.tables import idempotency_keys

KEEP_MS: Final = DAY_MS


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key is ours: run the operation, then `IdempotencyStore.finish` or `release`."""


@dataclass(frozen=True, slots=True)
class Replay:
    """The key was used before for this operation with the same request: answer this again."""

    status_code: int
    body: str


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The key was used before for a different request (or another operation)."""


@dataclass(frozen=True, slots=True)
class InProgress:
    """The first request with this key has not been answered yet."""


Outcome = Claimed | Replay | Mismatch | InProgress


class IdempotencyStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @translate_errors
    def claim(self, caller: str, key: str, operation: str, fingerprint: str, now_ms: int) -> Outcome:
        t = idempotency_keys
        with self.engine.begin() as conn:
            # Expired keys go first: this caller's, and anybody's (the created_at index bounds the cost).
            conn.execute(t.delete().where(t.c.created_at < now_ms - KEEP_MS))
            try:
                with conn.begin_nested():
                    conn.execute(
                        t.insert().values(
                            caller=caller, key=key, operation=operation, fingerprint=fingerprint, created_at=now_ms
                        )
                    )
            except sa.exc.IntegrityError:
                row = conn.execute(sa.select(t).where(t.c.caller == caller, t.c.key == key)).first()
                if row is None:  # released between our insert and our read: the caller may simply retry
                    return InProgress()
                m = row._mapping
                if m["operation"] != operation or m["fingerprint"] != fingerprint:
                    return Mismatch()
                if m["status_code"] is None:
                    return InProgress()
                return Replay(int(m["status_code"]), str(m["body"]))
        return Claimed()

    @translate_errors
    def finish(self, caller: str, key: str, status_code: int, body: str) -> None:
        t = idempotency_keys
        with self.engine.begin() as conn:
            conn.execute(
                t.update().where(t.c.caller == caller, t.c.key == key).values(status_code=status_code, body=body)
            )

    @translate_errors
    def release(self, caller: str, key: str) -> None:
        t = idempotency_keys
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.caller == caller, t.c.key == key, t.c.status_code.is_(None)))

    @translate_errors
    def prune(self, older_than: int) -> int:
        """Delete every key created before ``older_than`` (epoch ms); returns how many went.

        Maintenance calls ``prune(now_ms - KEEP_MS)``: a key past its 24 h replays nothing anyway.
        """
        t = idempotency_keys
        with self.engine.begin() as conn:
            return int(conn.execute(t.delete().where(t.c.created_at < older_than)).rowcount)
