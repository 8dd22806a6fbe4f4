"""`seqexport maintain`: the control plane's one maintenance pass (issue 23).

Compacts old history (`store.compaction`) and prunes what only matters for a while: Idempotency-Key
results older than a day (`store.idempotency`), connection tests older than the rate limit's window
(`store.rate_limit`), writer leases that lapsed more than a TTL ago (`store.lease`) and webhook
events, deliveries and their log older than 30 days (`store.webhooks`, once none is pending), rate
events older than their rule's window, and external ids that no export took within
`UNUSED_EXTERNAL_ID_MS` (`store.external_ids`; a role setup issues a fresh one). Safe beside
deliveries and idempotent: a second pass right after the first removes nothing. The CLI
(`seqexport maintain`) and the Dagster schedule (`defs/maintenance.py`) both call `maintain`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from seqexport_dagster.progress import Advance, no_progress
from seqexport_dagster.store.compaction import CompactionReport, compact, cutoff_for
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.external_ids import prune_unused_external_ids
from seqexport_dagster.store.idempotency import IdempotencyStore
from seqexport_dagster.store.lease import LEASE_TTL_MS
from seqexport_dagster.store.rate_limit import LONGEST_WINDOW_MS, WINDOW_MS
from seqexport_dagster.store.tables import connection_tests, export_leases, rate_events
from seqexport_dagster.store.webhook_queue import prune_webhook_events


@dataclass(slots=True)
class MaintenanceReport:
    cutoff_ms: int
    compaction: CompactionReport = field(default_factory=CompactionReport)
    idempotency_keys: int = 0
    connection_tests: int = 0
    leases: int = 0
    webhook_events: int = 0
    rate_events: int = 0
    external_ids: int = 0

    def as_dict(self) -> dict[str, int]:
        c = self.compaction
        return {
            "cutoff_ms": self.cutoff_ms,
            "days_compacted": c.days,
            "days_kept": c.skipped,
            "windows_removed": c.windows,
            "parts_removed": c.parts,
            "run_log_removed": c.run_log,
            "summaries_written": c.summaries,
            "idempotency_keys_removed": self.idempotency_keys,
            "connection_tests_removed": self.connection_tests,
            "leases_removed": self.leases,
            "webhook_events_removed": self.webhook_events,
            "rate_events_removed": self.rate_events,
            "external_ids_removed": self.external_ids,
        }


def prune_connection_tests(engine: sa.Engine, now_ms: int) -> int:
    """Connection tests outside the rate limit's window count for nothing any more."""
    with engine.begin() as conn:
        t = connection_tests
        removed = int(conn.execute(t.delete().where(t.c.tested_at <= now_ms - WINDOW_MS)).rowcount or 0)
    return removed


def prune_rate_events(engine: sa.Engine, now_ms: int) -> int:
    """Rate events older than the longest rule's window count for nothing any more."""
    with engine.begin() as conn:
        r = rate_events
        return int(conn.execute(r.delete().where(r.c.at <= now_ms - LONGEST_WINDOW_MS)).rowcount or 0)


def prune_leases(engine: sa.Engine, now_ms: int) -> int:
    """Leases that lapsed a TTL ago: a claim takes a lapsed lease anyway, and a take-over of a dead
    holder only matters while its lease is live."""
    with engine.begin() as conn:
        t = export_leases
        return int(conn.execute(t.delete().where(t.c.expires_at <= now_ms - LEASE_TTL_MS)).rowcount or 0)


@translate_errors
def maintain(engine: sa.Engine, now_ms: int, *, progress: Advance = no_progress) -> MaintenanceReport:
    report = MaintenanceReport(cutoff_ms=cutoff_for(now_ms))
    report.compaction = compact(engine, now_ms, progress=progress)
    report.idempotency_keys = IdempotencyStore(engine).prune(now_ms)
    progress("pruning", 1, 6)
    report.connection_tests = prune_connection_tests(engine, now_ms)
    progress("pruning", 2, 6)
    report.leases = prune_leases(engine, now_ms)
    progress("pruning", 3, 6)
    report.webhook_events = prune_webhook_events(engine, now_ms)
    progress("pruning", 4, 6)
    report.rate_events = prune_rate_events(engine, now_ms)
    progress("pruning", 5, 6)
    report.external_ids = prune_unused_external_ids(engine, now_ms)
    progress("pruning", 6, 6)
    return report
