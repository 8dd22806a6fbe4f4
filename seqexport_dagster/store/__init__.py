"""The control plane: exports, datasets and positions, encrypted credentials, the windows ledger.

Import it from here: `records` (status names and frozen records), `exports` (the export registry),
`ledger` (windows, parts, positions and failures) and `control_plane` (the facade over both) are
its inside.
"""

from __future__ import annotations

from seqexport_dagster.store.control_plane import ControlPlane
from seqexport_dagster.store.exports import initial_position, new_export_id, seal_binding
from seqexport_dagster.store.records import (
    ACTIVE,
    CANCELED,
    COMMITTED,
    DELETED,
    FAILED,
    HISTORY_MS,
    LATE_PART,
    LEGACY_PART,
    PART_INTENT,
    PART_LANDED,
    PAUSED,
    PRUNE_AFTER_MS,
    RANGE_PART,
    RUNNING,
    SUCCESS_MARK,
    WORKER_LOST,
    DatasetState,
    ExportLifecycle,
    ExportRecord,
    ExportState,
    LedgerWindow,
    PartKind,
    PartRecord,
    PartStatus,
    RotationReport,
    RunSummary,
    WindowStatus,
    location_of,
    snapshot_window,
)

__all__ = [
    "ACTIVE",
    "CANCELED",
    "COMMITTED",
    "DELETED",
    "FAILED",
    "HISTORY_MS",
    "PRUNE_AFTER_MS",
    "LATE_PART",
    "LEGACY_PART",
    "PART_INTENT",
    "PART_LANDED",
    "PAUSED",
    "RANGE_PART",
    "RUNNING",
    "SUCCESS_MARK",
    "WORKER_LOST",
    "ControlPlane",
    "DatasetState",
    "ExportRecord",
    "ExportState",
    "ExportLifecycle",
    "LedgerWindow",
    "PartKind",
    "PartRecord",
    "PartStatus",
    "RotationReport",
    "RunSummary",
    "WindowStatus",
    "initial_position",
    "location_of",
    "new_export_id",
    "seal_binding",
    "snapshot_window",
]
