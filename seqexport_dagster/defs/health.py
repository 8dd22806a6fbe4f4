"""Dagster events for health and completeness, built from the core's values (`seqexport_dagster.health`)."""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable
from typing import Any, Final

import dagster as dg

from seqexport_dagster.health import export_health, failing_exports
from seqexport_dagster.store import ExportRecord
from seqexport_dagster.store.fleet import DayTotals
from seqexport_dagster.window import iso_ms

STATUS_ASSET: Final = "export_status"
DATASET_CHECK: Final = "exports_healthy"
#: The check lists at most this many failing exports by name (the count is always complete).
LISTED: Final = 50


def day_metadata(totals: DayTotals) -> dict[str, Any]:
    return {
        "exports_complete": totals.exports,
        "windows": totals.windows,
        "rows": totals.rows,
        "files": totals.files,
        "bytes": totals.bytes,
    }


def day_event(dataset: str, day: dt.date, totals: DayTotals) -> dg.AssetMaterialization:
    return dg.AssetMaterialization(asset_key=dataset, partition=day.isoformat(), metadata=day_metadata(totals))


def status_metadata(export: ExportRecord, now_ms: int) -> dict[str, Any]:
    h = export_health(export, now_ms)
    return {
        "account": h.account_id,
        "status": h.status,
        "health": h.health,
        "position": iso_ms(h.position_ms) if h.position_ms is not None else "-",
        "behind_minutes": h.behind_ms // 60_000 if h.behind_ms is not None else "-",
        "snapshot_late_minutes": h.snapshot_late_ms // 60_000 if h.snapshot_late_ms is not None else "-",
        "failures": h.failures,
        "next_retry": iso_ms(h.next_retry_at) if h.next_retry_at is not None else "-",
        "last_error": f"{h.last_error_dataset}: {h.last_error}" if h.last_error else "-",
        "last_error_at": iso_ms(h.last_error_at) if h.last_error_at is not None else "-",
        "as_of": iso_ms(now_ms),
    }


def status_event(export: ExportRecord, now_ms: int) -> dg.AssetMaterialization:
    return dg.AssetMaterialization(
        asset_key=STATUS_ASSET, partition=export.id, metadata=status_metadata(export, now_ms)
    )


def check_evaluation(exports: Iterable[ExportRecord], dataset: str) -> dg.AssetCheckEvaluation:
    failing = failing_exports(exports, dataset)
    listed = "\n".join(
        f"{f.export_id} (account {f.account_id}, {f.failures} failure(s)): {f.error}" for f in failing[:LISTED]
    )
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(dataset),
        check_name=DATASET_CHECK,
        passed=not failing,
        metadata={
            "failing_exports": len(failing),
            "failing": dg.MetadataValue.md(listed.replace("\n", "  \n")) if failing else "-",
            "export_ids": ", ".join(f.export_id for f in failing[:LISTED]) or "-",
        },
        severity=dg.AssetCheckSeverity.ERROR,
        description=(f"{len(failing)} export(s) failing: " + listed) if failing else "every active export is healthy",
    )


def failing_digest(exports: Iterable[ExportRecord], datasets: Iterable[str]) -> str:
    """Changes when the set of failing exports or any of their errors changes (for the sensor's cursor)."""
    text = "|".join(f"{d}:{f.export_id}:{f.failures}:{f.error}" for d in datasets for f in failing_exports(exports, d))
    return f"{zlib.crc32(text.encode()):08x}"
