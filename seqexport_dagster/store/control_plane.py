"""`ControlPlane`: the one object callers hold for the control-plane database.

It is the export registry (`ExportStore`) and the ledger (`LedgerStore`, with reconciliation's
queries in `LatePartsStore`) over one engine, plus the
migration that creates both. Every database failure leaves as `RetryableError`: a control plane
briefly away is transient (`database.translate_errors`).
"""

from __future__ import annotations

from pathlib import Path

from seqexport_dagster.store.database import secure_sqlite_file, translate_errors
from seqexport_dagster.store.exports import ExportStore
from seqexport_dagster.store.late_parts import LatePartsStore
from seqexport_dagster.store.table_log import TableLogStore


class ControlPlane(ExportStore, LatePartsStore, TableLogStore):
    """`ControlPlane(engine, box)`: exports and ledger together, as runs, the API and the CLI use them."""

    @translate_errors
    def migrate(self) -> None:
        # Imported here: only migrating needs Alembic (11 MB resident), so a process that just
        # exports need not load it. In a Dagster run worker Dagster's own storage loads it anyway.
        from alembic import command
        from alembic.config import Config

        secure_sqlite_file(self.engine.url)
        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            cfg.attributes["secret_box"] = self.box  # data migrations re-seal secrets (0003)
            command.upgrade(cfg, "head")
