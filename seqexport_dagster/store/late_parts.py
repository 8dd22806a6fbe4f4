"""The ledger's queries for reconciliation: which committed windows to check, and what they carry.

Late rows (`seqexport_dagster.reconcile`) are found by id against the parts that *landed*, at every
location the window was ever delivered to (after a destination change the window's first parts
stay at the old place and its late rows go to the current one, `delivery.Attempt.deliver`).
"""

from __future__ import annotations

import sqlalchemy as sa

from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.ledger import LedgerStore
from seqexport_dagster.store.records import COMMITTED, PART_INTENT, PartRecord, part_record_of
from seqexport_dagster.store.tables import parts, windows
from seqexport_dagster.window import DAY_MS, Window


class LatePartsStore(LedgerStore):
    """Mixed into `ControlPlane` with the ledger it reads."""

    def committed_since(self, export_id: str, dataset: str, *, since_ms: int, until_ms: int) -> list[Window]:
        """The distinct windows committed (anywhere) that end in ``(since_ms, until_ms]``: what
        reconciliation checks for late rows. Attempts are looked up from a day before ``since_ms``,
        since a window that ends after it may have been started that long before."""
        found = {
            w.window
            for w in self.ledger(export_id, dataset=dataset, since_ms=since_ms - DAY_MS)
            if w.status == COMMITTED and since_ms < w.window.to_ms <= until_ms
        }
        return sorted(found)

    @translate_errors
    def windows_awaiting_parts(self, export_id: str, dataset: str, location: str, until_ms: int) -> list[Window]:
        """Windows behind ``until_ms`` (the position) with a part at ``location`` that never landed:
        an appended late-row part whose every try failed. Reconciliation comes back to them."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(parts.c.from_ms, parts.c.to_ms)
                .where(
                    parts.c.export_id == export_id,
                    parts.c.dataset == dataset,
                    parts.c.location == location,
                    parts.c.status == PART_INTENT,
                    parts.c.to_ms <= until_ms,
                )
                .distinct()
            ).all()
        return sorted(Window(r.from_ms, r.to_ms) for r in rows)

    @translate_errors
    def parts_everywhere(self, export_id: str, dataset: str, window: Window) -> dict[str, list[PartRecord]]:
        """The part ledger of one window at every location it was committed at, by location."""
        committed = (
            sa.select(windows.c.id)
            .where(
                windows.c.export_id == parts.c.export_id,
                windows.c.dataset == parts.c.dataset,
                windows.c.from_ms == parts.c.from_ms,
                windows.c.to_ms == parts.c.to_ms,
                windows.c.location == parts.c.location,
                windows.c.status == COMMITTED,
            )
            .exists()
        )
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(parts)
                .where(
                    parts.c.export_id == export_id,
                    parts.c.dataset == dataset,
                    parts.c.from_ms == window.from_ms,
                    parts.c.to_ms == window.to_ms,
                    committed,
                )
                .order_by(parts.c.location, parts.c.part)
            ).all()
        found: dict[str, list[PartRecord]] = {}
        for r in rows:
            found.setdefault(r.location, []).append(part_record_of(r))
        return found
