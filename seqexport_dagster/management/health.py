"""Per-export health, as the operator sees it at a glance: pure, from the control plane's records.

The status asset (one partition per export) and the per-dataset asset check in Dagster are built
from these values; the CLI and API read the same records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seqexport_dagster.contract.window import MINUTE_MS, frequency_ms, iso_ms
from seqexport_dagster.management.status import DatasetStatus, export_status
from seqexport_dagster.store import ACTIVE, ExportLifecycle, ExportRecord

OK, FAILING, PAUSED = "ok", "failing", "paused"
#: How stale a shown "behind" may be without a new value being recorded (issue 42): a dataset is on
#: schedule while it trails by at most its frequency + lag + this; past that its band (and so its
#: recorded value) changes each time its delay doubles or its position moves.
SLACK_MS = 15 * MINUTE_MS


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


@dataclass(frozen=True, slots=True)
class Behind:
    """One dataset's delay in words, and the band it is in: ``band`` is "" while on schedule, else
    what must change for a new value to be recorded (its position, and its delay's doubling step)."""

    dataset: str
    band: str
    text: str


def duration(ms: int) -> str:
    """``14 min``, ``2 h 05 min``, ``3 d 02 h``: a delay an operator reads at a glance."""
    minutes = ms // MINUTE_MS
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes // (24 * 60)} d {minutes // 60 % 24:02d} h"


def _step(late_ms: int) -> int:
    """The doubling step of a delay past the slack: 0 up to 2 × slack, 1 up to 4 ×, ..."""
    return max(0, (late_ms // SLACK_MS).bit_length() - 1)


def dataset_behind(export: ExportRecord, d: DatasetStatus, now_ms: int) -> Behind:
    """``4 min behind at 03:04Z, on schedule (updated past 31 min); delivered through …``:
    the delay, when it was taken, the bound within which it holds, and the position, which stays
    true until it moves. A failing dataset says so first."""
    at = iso_ms(now_ms)[11:16] + "Z"
    through = iso_ms(d.position_ms)[:16] + "Z"
    failing = f"failing (attempt {d.last_error.attempts}); " if d.last_error and d.last_error.attempts else ""
    if export.status != ACTIVE:
        return Behind(d.dataset, "", f"{export.status}; delivered through {through}")
    if d.is_snapshot:
        late = d.snapshot_late_ms or 0
        if late <= SLACK_MS:
            due = iso_ms(d.snapshot_due_at or 0)
            return Behind(d.dataset, "", f"{failing}on schedule: the snapshot of {through[:10]} is due {due}")
        text = f"{failing}snapshot of {through[:10]} {duration(late)} late at {at}"
        return Behind(d.dataset, f"late{_step(late)}@{d.position_ms}", text)
    behind = d.behind_ms or 0
    bound = frequency_ms(export.frequency) + export.lag_ms + SLACK_MS
    if behind <= bound:
        text = f"{failing}{duration(behind)} behind at {at}, on schedule (updated past {duration(bound)})"
        return Behind(d.dataset, "", f"{text}; delivered through {through}")
    text = f"{failing}{duration(behind)} behind at {at} (updated as it doubles); delivered through {through}"
    return Behind(d.dataset, f"behind{_step(behind - bound)}@{d.position_ms}", text)


def datasets_behind(export: ExportRecord, now_ms: int) -> list[Behind]:
    """Each dataset's delay, in the export's dataset order (`dataset_behind`)."""
    return [dataset_behind(export, d, now_ms) for d in export_status(export, now_ms).datasets]


def behind_band(export: ExportRecord, now_ms: int) -> str:
    """ "" while every dataset is on schedule; else what a change of any dataset's band is. The
    scheduler sensor records an export's status when this changes, so a shown value stays true
    within `SLACK_MS` while on schedule, and says when it was taken otherwise."""
    return ",".join(f"{b.dataset}:{b.band}" for b in datasets_behind(export, now_ms) if b.band)
