"""The per-account limit on connection tests, kept in the control plane so it holds across processes.

A connection test connects to whatever host and port the customer names, and its outcome (refused,
timed out, TLS failed, answered) tells them something about that port. Unlimited, it would be a
port scanner run from our network. So each account gets `LIMIT` tests per rolling `WINDOW_MS`
(create and destination change alike), counted in ``connection_tests``: the CLI, the HTTP API and
the dashboard share one count, whichever process they run in. Refused attempts count too, so
hammering does not reopen the window sooner.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import MINUTE_MS
from seqexport_dagster.errors import RateLimited
from seqexport_dagster.store.tables import connection_tests

LIMIT: Final = 20
WINDOW_MS: Final = 15 * MINUTE_MS


def admit_connection_test(engine: sa.Engine, account_id: str, now_ms: int) -> None:
    """Record one connection test of ``account_id``; raise `RateLimited` if it is over the limit.

    Insert, commit, then count the rows up to our own id: ids are assigned in commit order, so two
    processes racing at the limit cannot both pass (at worst one is refused a test it could have had).
    """
    since = now_ms - WINDOW_MS
    with engine.begin() as conn:
        conn.execute(
            connection_tests.delete().where(
                connection_tests.c.account_id == account_id, connection_tests.c.tested_at <= since
            )
        )
        key = conn.execute(connection_tests.insert().values(account_id=account_id, tested_at=now_ms))
        own_id = int(key.inserted_primary_key[0])  # type: ignore[index]
    with engine.connect() as conn:
        recent = (
            conn.execute(
                sa.select(connection_tests.c.tested_at)
                .where(
                    connection_tests.c.account_id == account_id,
                    connection_tests.c.tested_at > since,
                    connection_tests.c.id <= own_id,
                )
                .order_by(connection_tests.c.tested_at)
            )
            .scalars()
            .all()
        )
    if len(recent) > LIMIT:
        retry_at = int(recent[-LIMIT]) + WINDOW_MS
        minutes = max(1, -(-(retry_at - now_ms) // MINUTE_MS))
        raise RateLimited(
            f"account {account_id} has run {LIMIT} connection tests in the last {WINDOW_MS // MINUTE_MS} minutes, "
            f"the most allowed; nothing was tested or saved; try again in {minutes} minute(s)",
            retry_after_ms=retry_at - now_ms,
        )
