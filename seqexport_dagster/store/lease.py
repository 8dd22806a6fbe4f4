"""Writer leases: at most one writer per export, across scheduled runs, UI launches and backfills.

A lease is a row (export, holder, expiry). `claim` is atomic: it takes a free or expired lease, or
renews one the holder already has, in one statement (an UPDATE guarded by the expiry, or an INSERT
that the primary key lets only one claimer win). The holder renews it before every file (`renew`),
so a worker killed mid-window stops renewing and its lease lapses after `LEASE_TTL_MS`; nothing is
committed until a window is whole, so the next holder simply writes the window again.

The TTL must outlast one file's PUT (botocore's own timeouts and retries), not a whole window.
When the holder is known to be dead sooner (its Dagster run ended: failed, canceled, or marked
failed by run monitoring), the next run takes the lease over at once (`take_over`) rather than
waiting out the TTL.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from seqexport_dagster.errors import RetryableError
from seqexport_dagster.store.prepared import Prepared, change, fetch
from seqexport_dagster.store.tables import export_leases

LEASE_TTL_MS: Final = 5 * 60_000


class Leases:
    def __init__(self, engine: sa.Engine, *, ttl_ms: int = LEASE_TTL_MS) -> None:
        self.engine = engine
        self.ttl_ms = ttl_ms

    def claim(self, export_id: str, holder: str, now_ms: int) -> bool:
        """Take the export's lease for ``holder`` (or extend its own); False while another holds it."""
        lease = {"holder": holder, "claimed_at": now_ms, "expires_at": now_ms + self.ttl_ms}
        try:
            with self.engine.begin() as conn:
                taken = change(conn, _CLAIM, {"b_export_id": export_id, "b_holder": holder, "b_now": now_ms, **lease})
                if taken == 1:
                    return True
                try:
                    with conn.begin_nested():
                        conn.execute(_INSERT, {"export_id": export_id, **lease})
                except sa.exc.IntegrityError:
                    return False
                return True
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise RetryableError("control-plane database unavailable while claiming a writer lease") from exc

    def holder(self, export_id: str, now_ms: int) -> str | None:
        """Who holds the export's lease now (``None``: free or lapsed)."""
        t = export_leases
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(t.c.holder).where(t.c.export_id == export_id, t.c.expires_at > now_ms)
            ).scalar()

    def take_over(self, export_id: str, dead_holder: str, holder: str, now_ms: int) -> bool:
        """Take a lease from a holder known to be dead (its run ended) before it lapses.

        Guarded by the old holder's name, so only one taker wins, and never from a live renewal
        that replaced it in between.
        """
        t = export_leases
        with self.engine.begin() as conn:
            taken = conn.execute(
                t.update()
                .where(t.c.export_id == export_id, t.c.holder == dead_holder)
                .values(holder=holder, claimed_at=now_ms, expires_at=now_ms + self.ttl_ms)
            ).rowcount
        return taken == 1

    def renew(self, export_id: str, holder: str, now_ms: int) -> bool:
        """Extend the holder's lease; False if it lapsed and someone else took it (stop writing)."""
        with self.engine.begin() as conn:
            kept = change(
                conn, _RENEW, {"b_export_id": export_id, "b_holder": holder, "b_expires_at": now_ms + self.ttl_ms}
            )
        return kept == 1

    def release(self, export_id: str, holder: str) -> None:
        with self.engine.begin() as conn:
            change(conn, _RELEASE, {"b_export_id": export_id, "b_holder": holder})

    def held(self, now_ms: int) -> dict[str, str]:
        """Unexpired leases: export id → holder (one query, for the sensor)."""
        with self.engine.connect() as conn:
            rows = fetch(conn, _HELD, {"b_now": now_ms})
        return {r.export_id: r.holder for r in rows}


# Built once and `Prepared` (a run claims and releases for every export, renews before every file, the sensor
# reads leases every tick): building a statement and its cache key costs more Python than SQLite
# takes to run it. ``b_`` parameters fill the WHERE clause; an UPDATE's other parameters name the
# columns it sets.
_CLAIM = Prepared(
    export_leases.update().where(
        export_leases.c.export_id == sa.bindparam("b_export_id"),
        sa.or_(export_leases.c.expires_at <= sa.bindparam("b_now"), export_leases.c.holder == sa.bindparam("b_holder")),
    )
)
_INSERT = export_leases.insert()
_RELEASE = Prepared(
    export_leases.delete().where(
        export_leases.c.export_id == sa.bindparam("b_export_id"), export_leases.c.holder == sa.bindparam("b_holder")
    )
)
_RENEW = Prepared(
    export_leases.update()
    .where(export_leases.c.export_id == sa.bindparam("b_export_id"), export_leases.c.holder == sa.bindparam("b_holder"))
    .values(expires_at=sa.bindparam("b_expires_at"))
)
_HELD = Prepared(
    sa.select(export_leases.c.export_id, export_leases.c.holder).where(
        export_leases.c.expires_at > sa.bindparam("b_now")
    )
)
