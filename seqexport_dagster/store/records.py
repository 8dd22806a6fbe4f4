"""The control plane's values: status names, and the frozen records its queries return.

Plain values with no database access, so every layer (runner, planner, API, CLI) can hold them.
The status enums' values are the strings stored in the control-plane tables (a `StrEnum` member
equals its string, so rows read back as plain strings compare equal).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, FileFormat
from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.contract.window import DAY_MS, Window, day_of


class ExportLifecycle(StrEnum):
    """An export's status column. Deleted exports are kept (their ledger is history), never listed.

    (`api.ExportStatus` is something else: the status view of one export.)
    """

    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"


class WindowStatus(StrEnum):
    """One window attempt in the ledger. Only a committed attempt moves the position."""

    RUNNING = "running"
    COMMITTED = "committed"
    FAILED = "failed"
    CANCELED = "canceled"  # paused, deleted, destination changed or run terminated: not a failure


class PartStatus(StrEnum):
    INTENT = "intent"  # recorded before its PUT; the PUT is not known to have landed
    LANDED = "landed"  # the store answered 2xx (or 412: an earlier attempt created it)


class PartKind(StrEnum):
    RANGE = "range"  # a window's own part
    LATE = "late"  # late rows appended to a committed window by reconciliation
    LEGACY = "legacy"  # written before the part ledger kept row boundaries
    SUCCESS = "success"  # a snapshot's _SUCCESS marker (part number -1)


# The members under their short names, as most callers use them.
ACTIVE: Final = ExportLifecycle.ACTIVE
PAUSED: Final = ExportLifecycle.PAUSED
DELETED: Final = ExportLifecycle.DELETED
RUNNING: Final = WindowStatus.RUNNING
COMMITTED: Final = WindowStatus.COMMITTED
FAILED: Final = WindowStatus.FAILED
CANCELED: Final = WindowStatus.CANCELED
PART_INTENT: Final = PartStatus.INTENT
PART_LANDED: Final = PartStatus.LANDED
RANGE_PART: Final = PartKind.RANGE
LATE_PART: Final = PartKind.LATE
LEGACY_PART: Final = PartKind.LEGACY
SUCCESS_MARK: Final = PartKind.SUCCESS

HISTORY_MS = 14 * DAY_MS
#: Part ids of committed windows older than this are dropped: no reconciliation looks back further
#: (`reconcile`), and compaction keeps at least this much whole (`store.compaction`).
PRUNE_AFTER_MS: Final = 7 * DAY_MS
WORKER_LOST = "the run writing this window ended without finishing (run worker lost); it was retried"


@dataclass(frozen=True, slots=True)
class DatasetState:
    dataset: str
    added_at: int
    position_ms: int
    failures: int = 0
    next_retry_at: int | None = None
    last_error: str | None = None
    last_error_at: int | None = None
    last_error_window: Window | None = None
    #: Start of the last complete scheduled reconciliation of this (event) dataset; None: never.
    reconciled_at: int | None = None


@dataclass(frozen=True, slots=True)
class ExportRecord:
    """An export as the API shows it: never carries the secret."""

    id: str
    account_id: str
    provider: str
    bucket: str
    region: str | None
    endpoint: str | None
    prefix: str
    access_key_id: str | None
    frequency: str
    lag_ms: int
    status: str
    config_version: int
    destination_version: int
    export_now_at: int | None
    created_at: int
    updated_at: int
    deleted_at: int | None
    datasets: tuple[DatasetState, ...] = field(default=())
    #: Server-side encryption of every object (`destination.encryption`); None: the bucket's default.
    sse: str | None = None
    kms_key_id: str | None = None
    #: A role written as instead of keys, and the external id its trust policy must require.
    role_arn: str | None = None
    external_id: str | None = None
    #: The file format of new windows (`file_format`); a window keeps the format it started in.
    format: FileFormat = DEFAULT_FORMAT
    #: "delta": a Delta Lake log per dataset beside the Parquet parts (`delivery.table`); None: files only.
    table: str | None = None

    @property
    def location(self) -> str:
        return location_of(self.provider, self.endpoint, self.bucket, self.prefix)

    def dataset_state(self, name: str) -> DatasetState | None:
        return next((d for d in self.datasets if d.dataset == name), None)

    def export_now_pending(self, state: DatasetState) -> bool:
        """Export now is satisfied once the dataset has written up to the request time."""
        if self.export_now_at is None:
            return False
        if state.dataset in EVENT_DATASETS:
            return state.position_ms < self.export_now_at - self.lag_ms
        return state.failures > 0


@dataclass(frozen=True, slots=True)
class ExportState:
    """What a run re-reads before every file."""

    status: str
    destination_version: int


@dataclass(frozen=True, slots=True)
class LedgerWindow:
    id: int
    dataset: str
    window: Window
    run_id: str | None
    status: str
    rows: int
    parts: int
    bytes: int
    error: str | None
    started_at: int
    finished_at: int | None
    snapshot_taken_at: int | None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as the customer's history shows it (all windows that run attempted)."""

    run_id: str
    started_at: int
    finished_at: int | None
    status: str
    datasets: tuple[str, ...]
    windows: int
    rows: int
    files: int
    bytes: int
    error: str | None


@dataclass(frozen=True, slots=True)
class PartRecord:
    """One part number of one window at one location, as the part ledger knows it."""

    number: int
    key: str
    kind: str  # a `PartKind` value
    status: str  # a `PartStatus` value
    #: Sort key of the part's last row: (recorded_at, id) for events, (id,) for the snapshot.
    last: tuple[str, ...] | None
    rows: int
    size: int
    md5: str | None
    ids: bytes | None  # `writer.pack_ids` form; None for legacy parts and once pruned
    #: The window attempt that recorded the part (a later one may have re-sent it).
    attempt: int | None = None

    @property
    def landed(self) -> bool:
        return self.status == PART_LANDED


# The ``*_of`` builders read a row through its mapping: SQLAlchemy's ``row.name`` costs a failed
# class-attribute lookup per access (about 0.6 µs), ``row._mapping["name"]`` a dict lookup, and
# every run reads its export and part ledger again and again (the simulator's profile).


def part_record_of(row: Any) -> PartRecord:
    r = row._mapping
    last: tuple[str, ...] | None = None
    if r["last_id"] is not None:
        last = (r["last_recorded_at"], r["last_id"]) if r["last_recorded_at"] is not None else (r["last_id"],)
    return PartRecord(
        r["part"],
        r["key"],
        r["kind"],
        r["status"],
        last,
        r["rows"],
        r["bytes"],
        r["md5"],
        r["ids"],
        r["window_id"] if "window_id" in r else None,
    )


@dataclass(slots=True)
class RotationReport:
    resealed: int = 0
    #: (export id, why its secret did not open), for each row left as it was.
    failed: list[tuple[str, str]] = field(default_factory=list)


def location_of(provider: str, endpoint: str | None, bucket: str, prefix: str) -> str:
    material = "\0".join((provider, endpoint or "", bucket, prefix))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def dataset_state_of(row: Any) -> DatasetState:
    d = row._mapping
    error_from, error_to = d["last_error_from_ms"], d["last_error_to_ms"]
    return DatasetState(
        dataset=d["dataset"],
        added_at=d["added_at"],
        position_ms=d["position_ms"],
        failures=d["failures"],
        next_retry_at=d["next_retry_at"],
        last_error=d["last_error"],
        last_error_at=d["last_error_at"],
        last_error_window=Window(error_from, error_to) if error_from is not None and error_to is not None else None,
        reconciled_at=d["reconciled_at"],
    )


def snapshot_window(day_ms: int) -> Window:
    """The ledger records a snapshot as the whole day it describes."""
    return Window.whole_day(day_of(day_ms))
