"""Per-export health, as the operator sees it at a glance: pure, from the control plane's records.

The status asset (one partition per export) and the per-dataset asset check in Dagster are built
from these values; the CLI and API read the same records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seqexport_dagster.management.status import export_status
from seqexport_dagster.store import ACTIVE, ExportLifecycle, ExportRecord

OK, FAILING, PAUSED = "ok", "failing", "paused"


@dataclass(frozen=True, slots=True)
class ExportHealth:
    export_id: str
    account_id: str
    status: str
    health: str
    #: The least advanced event dataset's position (epoch ms) and how far it trails now, and how late
    #: the daily snapshot is: `status.ExportStatus`'s values (None: deleted, or no such dataset).
    position_ms: int | None
    behind_ms: int | None
    snapshot_late_ms: int | None
    failures: int
    next_retry_at: int | None
    last_error: str | None
    last_error_dataset: str | None
    last_error_at: int | None


def export_health(export: ExportRecord, now_ms: int) -> ExportHealth:
    states = list(export.datasets)
    status = export_status(export, now_ms)
    errors = sorted((s for s in states if s.last_error), key=lambda s: s.last_error_at or 0)
    latest = errors[-1] if errors else None
    failures = max((s.failures for s in states), default=0)
    retries = [s.next_retry_at for s in states if s.next_retry_at is not None]
    if export.status != ACTIVE:
        health = PAUSED if export.status == ExportLifecycle.PAUSED else export.status
    else:
        health = FAILING if failures else OK
    return ExportHealth(
        export_id=export.id,
        account_id=export.account_id,
        status=export.status,
        health=health,
        position_ms=status.position_ms,
        behind_ms=status.behind_ms,
        snapshot_late_ms=status.snapshot_late_ms,
        failures=failures,
        next_retry_at=min(retries) if retries else None,
        last_error=latest.last_error if latest else None,
        last_error_dataset=latest.dataset if latest else None,
        last_error_at=latest.last_error_at if latest else None,
    )


@dataclass(frozen=True, slots=True)
class Failing:
    export_id: str
    account_id: str
    failures: int
    error: str


def failing_exports(exports: Iterable[ExportRecord], dataset: str) -> list[Failing]:
    """Active exports whose ``dataset`` is failing now (a failure not yet followed by a success)."""
    out = []
    for e in exports:
        if e.status != ACTIVE:
            continue
        s = e.dataset_state(dataset)
        if s is not None and s.failures > 0:
            out.append(Failing(e.id, e.account_id, s.failures, s.last_error or "unknown error"))
    return sorted(out, key=lambda f: f.export_id)
