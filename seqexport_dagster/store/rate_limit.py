"""Per-account limits on costly or abusable actions, kept in the control plane so they hold across
processes (the CLI, the HTTP API and the dashboard share one count, whichever process they run in).

A connection test connects to whatever host and port the customer names, and its outcome (refused,
timed out, TLS failed, answered) tells them something about that port. Unlimited, it would be a
port scanner run from our network. So each account gets `LIMIT` tests per rolling `WINDOW_MS`
(create and destination change alike), counted in ``connection_tests``.

The same rule (`admit`, counted in ``rate_events``) bounds what one account can make the fleet do
for it (issue 41): webhook test sends and adds (`WEBHOOK_TEST`, `WEBHOOK_ADD`) and role setups,
each of which issues an external id (`ROLE_SETUP`). There a refusal is read-only (nothing is
recorded for it): an account hammering past its limit then costs one indexed read per call, and
never takes the database's write lock from other accounts' requests (issue 41's flood).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

import sqlalchemy as sa

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
from seqexport_dagster.errors import RateLimited
from seqexport_dagster.store.tables import connection_tests, rate_events

LIMIT: Final = 20
WINDOW_MS: Final = 15 * MINUTE_MS


@dataclass(frozen=True, slots=True)
class Rule:
    action: str
    limit: int
    window_ms: int
    #: What was done, plural, for the refusal: "webhook test sends".
    what: str


WEBHOOK_TEST: Final = Rule("webhook_test", 10, 10 * MINUTE_MS, "webhook test sends")
WEBHOOK_ADD: Final = Rule("webhook_add", 20, HOUR_MS, "webhook adds")
ROLE_SETUP: Final = Rule("role_setup", 20, HOUR_MS, "role setups")
#: `maintain` prunes rate events older than this: none of them counts any more.
LONGEST_WINDOW_MS: Final = max(r.window_ms for r in (WEBHOOK_TEST, WEBHOOK_ADD, ROLE_SETUP))


def admit_connection_test(engine: sa.Engine, account_id: str, now_ms: int) -> None:
    """Record one connection test of ``account_id``; raise `RateLimited` if it is over the limit."""
    c = connection_tests.c
    _admit(
        engine,
        connection_tests,
        c.tested_at,
        c.account_id == account_id,
        {"account_id": account_id, "tested_at": now_ms},
        Rule("connection_test", LIMIT, WINDOW_MS, "connection tests"),
        account_id,
        now_ms,
        "nothing was tested or saved",
    )


def admit(engine: sa.Engine, rule: Rule, account_id: str, now_ms: int) -> None:
    """Record one ``rule.action`` of ``account_id``; raise `RateLimited` if it is over the limit."""
    r = rate_events.c
    mine = sa.and_(r.account_id == account_id, r.action == rule.action)
    with engine.connect() as conn:
        recent = (
            conn.execute(sa.select(r.at).where(mine, r.at > now_ms - rule.window_ms).order_by(r.at)).scalars().all()
        )
    if len(recent) >= rule.limit:  # refused without a write; the insert below still settles races
        _refuse(rule, account_id, now_ms, recent, "nothing was done")
    _admit(
        engine,
        rate_events,
        r.at,
        mine,
        {"account_id": account_id, "action": rule.action, "at": now_ms},
        rule,
        account_id,
        now_ms,
        "nothing was done",
    )


def _admit(
    engine: sa.Engine,
    table: sa.Table,
    at: sa.Column[int],
    mine: sa.ColumnElement[bool],
    row: dict[str, object],
    rule: Rule,
    account_id: str,
    now_ms: int,
    outcome: str,
) -> None:
    """Insert, commit, then count the rows up to our own id: ids are assigned in commit order, so two
    processes racing at the limit cannot both pass (at worst one is refused an action it could have had).
    """
    since = now_ms - rule.window_ms
    with engine.begin() as conn:
        conn.execute(table.delete().where(mine, at <= since))
        key = conn.execute(table.insert().values(**row))
        own_id = int(key.inserted_primary_key[0])  # type: ignore[index]
    with engine.connect() as conn:
        recent = conn.execute(sa.select(at).where(mine, at > since, table.c.id <= own_id).order_by(at)).scalars().all()
    if len(recent) > rule.limit:
        _refuse(rule, account_id, now_ms, recent, outcome)


def _refuse(rule: Rule, account_id: str, now_ms: int, recent: Sequence[int], outcome: str) -> NoReturn:
    """``recent``: the account's times of ``rule.action`` in the window, oldest first."""
    retry_at = int(recent[-rule.limit]) + rule.window_ms
    minutes = max(1, -(-(retry_at - now_ms) // MINUTE_MS))
    raise RateLimited(
        f"account {account_id} has made {rule.limit} {rule.what} in the last {rule.window_ms // MINUTE_MS} "
        f"minutes, the most allowed; {outcome}; try again in {minutes} minute(s)",
        retry_after_ms=retry_at - now_ms,
    )
