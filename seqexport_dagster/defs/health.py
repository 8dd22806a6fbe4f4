"""Dagster events for health and completeness, built from the core's values (`seqexport_dagster.management.health`)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any, Final

import dagster as dg

from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.defs.partitions import status_partition
from seqexport_dagster.delivery.planner import shard_of
from seqexport_dagster.management.health import datasets_behind, export_health, failing_exports
from seqexport_dagster.store import ExportRecord

STATUS_ASSET: Final = "export_status"
DATASET_CHECK: Final = "exports_healthy"
#: ``export_status``'s check: fails while any active export fails, naming each with its account.
STATUS_CHECK: Final = "no_failing_exports"
#: The check lists at most this many failing exports by name (the count is always complete).
LISTED: Final = 50


def status_metadata(export: ExportRecord, now_ms: int) -> dict[str, Any]:
    """What an export's partition page shows: its account, health, each dataset's delay (``behind
    <dataset>``, in words, with the time it was taken), last error and next retry. The page shows
    the latest materialization's entries overlaid by those of every later observation, so the
    newest value of each entry is shown whichever event carried it."""
    h = export_health(export, now_ms)
    return {  # what an operator reads first, first: the page keeps this order
        "account": h.account_id,
        "health": h.health,
        **{f"behind {b.dataset}": b.text for b in datasets_behind(export, now_ms)},
        "last_error": f"{h.last_error_dataset}: {h.last_error}" if h.last_error else "-",
        "next_retry": iso_ms(h.next_retry_at) if h.next_retry_at is not None else "-",
        "failures": h.failures,
        "last_error_at": iso_ms(h.last_error_at) if h.last_error_at is not None else "-",
        "status": h.status,
        "position": iso_ms(h.position_ms) if h.position_ms is not None else "-",
        "behind_minutes": h.behind_ms // 60_000 if h.behind_ms is not None else "-",
        "snapshot_late_minutes": h.snapshot_late_ms // 60_000 if h.snapshot_late_ms is not None else "-",
        "as_of": iso_ms(now_ms),
        # The Runs page's filter for this export's scheduled runs (tags are bounded: `defs.sensors`).
        "runs_tag": f"shard/{shard_of(export.id)}=yes",
    }


def status_event(export: ExportRecord, now_ms: int) -> dg.AssetObservation:
    """An observation, not a materialization: red and green on ``export_status`` are its runs'
    (`defs.export_status`); and the UI's "latest observation" query of the asset page finds one at
    once instead of scanning the event log backwards for an event kind the asset never had (issue 29)."""
    h = export_health(export, now_ms)
    return dg.AssetObservation(
        asset_key=STATUS_ASSET,
        partition=status_partition(export.account_id, export.id),
        metadata=status_metadata(export, now_ms),
        description=f"{export.id} (account {h.account_id}): {h.health}",
    )


def first_status(export: ExportRecord, now_ms: int) -> dg.AssetMaterialization:
    """The materialization that registers an export's partition (issue 42): green from the start,
    and every later observation shows on its page (the page overlays a materialization's entries
    with those of later observations, and shows nothing without one). An export failing already
    turns red at once: its status run fails after this (`defs.export_status`)."""
    h = export_health(export, now_ms)
    return dg.AssetMaterialization(
        asset_key=STATUS_ASSET,
        partition=status_partition(export.account_id, export.id),
        metadata=status_metadata(export, now_ms),
        description=f"{export.id} (account {h.account_id}): {h.health}",
    )


def check_evaluation(exports: Iterable[ExportRecord], dataset: str) -> dg.AssetCheckEvaluation:
    failing = failing_exports(exports, dataset)
    lines = [f"{f.export_id} (account {f.account_id}, {f.failures} failure(s)): {f.error}" for f in failing]
    return _evaluation(dataset, DATASET_CHECK, [f.export_id for f in failing], lines)


def status_check_evaluation(exports: Iterable[ExportRecord], datasets: Iterable[str]) -> dg.AssetCheckEvaluation:
    """``export_status``'s check: every failing export with its account, on the asset's own page."""
    records = list(exports)
    found: dict[str, str] = {}
    for dataset in datasets:
        for f in failing_exports(records, dataset):
            found.setdefault(
                f.export_id, f"{f.export_id} (account {f.account_id}, {f.failures} failure(s)): {dataset}: {f.error}"
            )
    ids = sorted(found)
    return _evaluation(STATUS_ASSET, STATUS_CHECK, ids, [found[i] for i in ids])


def _evaluation(asset: str, check: str, ids: list[str], lines: list[str]) -> dg.AssetCheckEvaluation:
    listed = "\n".join(lines[:LISTED])
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(asset),
        check_name=check,
        passed=not ids,
        metadata={
            "failing_exports": len(ids),
            "failing": dg.MetadataValue.md(listed.replace("\n", "  \n")) if ids else "-",
            "export_ids": ", ".join(ids[:LISTED]) or "-",
        },
        severity=dg.AssetCheckSeverity.ERROR,
        description=(f"{len(ids)} export(s) failing: " + listed) if ids else "every active export is healthy",
    )


def failing_digest(exports: Iterable[ExportRecord], datasets: Iterable[str]) -> str:
    """Changes when the set of failing exports or any of their errors changes (for the sensor's cursor)."""
    text = "|".join(f"{d}:{f.export_id}:{f.failures}:{f.error}" for d in datasets for f in failing_exports(exports, d))
    return f"{zlib.crc32(text.encode()):08x}"
