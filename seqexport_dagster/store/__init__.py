"""The control plane: exports, datasets and positions, encrypted credentials, the windows ledger.

Import it from here: `records` (status names and frozen records), `exports` (the export registry),
`ledger` (windows, parts, positions and failures) and `control_plane` (the facade over both) are
its inside.

The records are imported here; `ControlPlane` and the export helpers only when first asked for
(`__getattr__`): they pull in SQLAlchemy (about a quarter of a second), and the remote CLI, which
reads records from the HTTP API and never opens a database, must not pay for it (issue 40).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from seqexport_dagster.store.control_plane import ControlPlane
    from seqexport_dagster.store.exports import initial_position, new_export_id, seal_binding


def is_control_plane(store: object) -> bool:
    """``isinstance(store, ControlPlane)``, without importing it when nothing has: no instance can
    exist before its module is loaded. Code that takes either the control plane or the HTTP API's
    answers (the remote CLI's `verify --ledger`) asks this, so the remote path never loads SQLAlchemy."""
    module = sys.modules.get("seqexport_dagster.store.control_plane")
    return module is not None and isinstance(store, module.ControlPlane)


def __getattr__(name: str) -> Any:
    # Import statements, not `importlib.import_module`: ``python -X importtime`` shows only these.
    if name == "ControlPlane":
        from seqexport_dagster.store.control_plane import ControlPlane

        return ControlPlane
    if name in ("initial_position", "new_export_id", "seal_binding"):
        import seqexport_dagster.store.exports as exports

        return getattr(exports, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "is_control_plane",
    "location_of",
    "new_export_id",
    "seal_binding",
    "snapshot_window",
]
