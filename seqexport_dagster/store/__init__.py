"""The control plane: exports, datasets and positions, encrypted credentials, the windows ledger."""

from __future__ import annotations

from seqexport_dagster.store.store import ControlPlane, DatasetState, ExportRecord, RunSummary

__all__ = ["ControlPlane", "DatasetState", "ExportRecord", "RunSummary"]
