"""The simulated Sequenzy source: rows fed continuously into the real source tables (SQLite or
PostgreSQL), each one remembered with when it was recorded and when it became visible.

Most rows carry ``recorded_at`` just before now (inside the lag, so in a window still open). Late
rows carry a ``recorded_at`` anywhere back within the reconciliation horizon, so they fall in
windows already committed: across UTC midnight, during a pause, before or after a move, whatever
the world is doing when they are written. Subscribers are inserted, updated and removed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.contract.window import MINUTE_MS, iso_ms
from seqexport_dagster.source.tables import TABLES
from seqexport_dagster_tests.support.sim.wide import hostile_json


@dataclass(frozen=True, slots=True)
class SourceRow:
    id: str
    dataset: str
    account_id: str
    recorded_ms: int
    inserted_ms: int

    @property
    def late_ms(self) -> int:
        return self.inserted_ms - self.recorded_ms


def _value(name: str, kind: str, nullable: bool, enum: tuple[str, ...], rid: str, recorded: int) -> Any:
    if name == "id":
        return rid
    if name == "recorded_at":
        return iso_ms(recorded)
    if name in ("occurred_at", "created_at", "updated_at"):
        return iso_ms(recorded - 1_000)
    if enum:
        return enum[len(rid) % len(enum)]
    if nullable:
        return None
    if kind == "object":
        return "{}"
    if kind == "array":
        return "[]"
    if kind == "integer":
        return 1
    return f"v-{rid}"


def build_row(dataset: str, account_id: str, rid: str, recorded_ms: int) -> dict[str, Any]:
    row: dict[str, Any] = {"account_id": account_id}
    for f in DATASETS[dataset].fields:
        row[f.name] = _value(f.name, f.type, f.nullable, f.enum, rid, recorded_ms)
    if dataset == "subscribers":
        row["email"] = f"{rid}@example.com"
    return row


@dataclass
class SimSource:
    engine: sa.Engine
    rng: random.Random
    #: Late rows are written at most this long after their ``recorded_at`` (the documented horizon).
    lateness_ms: int
    late_share: float = 0.08
    rows: dict[str, SourceRow] = field(default_factory=dict)
    subscribers: dict[tuple[str, str], int] = field(default_factory=dict)  # (account, id) -> updated_at
    counter: int = 0
    #: The widened world's hostile JSON values (`wide.hostile_json`), drawn from their own stream.
    values_rng: random.Random | None = None
    hostile: dict[str, str] = field(default_factory=dict)  # row id -> its properties' source text

    def _id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter:09d}"

    def feed(self, accounts: list[str], now_ms: int, since_ms: int) -> int:
        """Rows made visible between ``since_ms`` and ``now_ms`` (one insert per table)."""
        batches: dict[str, list[dict[str, Any]]] = {name: [] for name in EVENT_DATASETS}
        span = max(now_ms - since_ms, 1)
        for account in accounts:
            for dataset in EVENT_DATASETS:
                for _ in range(self.rng.choice((0, 0, 1, 1, 2, 3)) * max(1, span // (20 * MINUTE_MS))):
                    if self.rng.random() < self.late_share:
                        back = self.rng.randrange(3 * MINUTE_MS, self.lateness_ms)
                    else:
                        back = self.rng.randrange(0, 90_000)
                    recorded = now_ms - back
                    rid = self._id(dataset[:3])
                    row = build_row(dataset, account, rid, recorded)
                    if dataset == "custom_events" and self.values_rng is not None and self.values_rng.random() < 0.3:
                        row["properties"] = self.hostile[rid] = hostile_json(self.values_rng)
                    batches[dataset].append(row)
                    self.rows[rid] = SourceRow(rid, dataset, account, recorded, now_ms)
        total = 0
        with self.engine.begin() as conn:
            for dataset, batch in batches.items():
                if batch:
                    conn.execute(sa.insert(TABLES[dataset]), batch)
                    total += len(batch)
            total += self._subscribers(conn, accounts, now_ms)
        return total

    def _subscribers(self, conn: sa.Connection, accounts: list[str], now_ms: int) -> int:
        table = TABLES["subscribers"]
        changed = 0
        for account in accounts:
            roll = self.rng.random()
            mine = [sid for (acc, sid) in self.subscribers if acc == account]
            if roll < 0.5 or not mine:
                rid = self._id("sub")
                conn.execute(sa.insert(table), [build_row("subscribers", account, rid, now_ms)])
                self.subscribers[(account, rid)] = now_ms
            elif roll < 0.8:
                sid = self.rng.choice(mine)
                conn.execute(_UNSUBSCRIBE, {"b_account_id": account, "b_id": sid, "b_updated_at": iso_ms(now_ms)})
                self.subscribers[(account, sid)] = now_ms
            else:
                sid = self.rng.choice(mine)
                conn.execute(_DELETE_SUBSCRIBER, {"b_account_id": account, "b_id": sid})
                del self.subscribers[(account, sid)]
            changed += 1
        return changed


# Built once (every tick changes subscribers of every account): building a statement and its cache
# key cost more than SQLite takes to run it (the simulator's profile).
_SUBSCRIBER = sa.and_(
    TABLES["subscribers"].c.account_id == sa.bindparam("b_account_id"),
    TABLES["subscribers"].c.id == sa.bindparam("b_id"),
)
_UNSUBSCRIBE = (
    sa.update(TABLES["subscribers"])
    .where(_SUBSCRIBER)
    .values(updated_at=sa.bindparam("b_updated_at"), status="unsubscribed")
)
_DELETE_SUBSCRIBER = sa.delete(TABLES["subscribers"]).where(_SUBSCRIBER)
