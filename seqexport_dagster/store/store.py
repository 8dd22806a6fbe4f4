"""The control-plane store: the one place that reads and writes exports, positions and the ledger.

Invariants kept here:
- A position only moves in the transaction that commits its window in the ledger, and only forward
  along the chain (the committed window must start exactly at the current position).
- Secrets are stored sealed (`SecretBox`) and only `destination_config` returns one decrypted.
- Every database failure leaves as `RetryableError`: a control plane briefly away is transient.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa

from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.errors import ConflictError, NotFound, RetryableError, SecretKeyError, sanitize_error
from seqexport_dagster.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.store.crypto import SealBinding, SecretBox
from seqexport_dagster.store.database import secure_sqlite_file
from seqexport_dagster.store.tables import export_datasets, exports, parts, windows
from seqexport_dagster.window import DAY_MS, Window, backoff_ms, date_key, day_of, day_start

P = ParamSpec("P")
T = TypeVar("T")

ACTIVE, PAUSED, DELETED = "active", "paused", "deleted"
RUNNING, COMMITTED, FAILED, CANCELED = "running", "committed", "failed", "canceled"
PART_INTENT, PART_LANDED = "intent", "landed"
RANGE_PART, LATE_PART, LEGACY_PART, SUCCESS_MARK = "range", "late", "legacy", "success"
HISTORY_MS = 14 * DAY_MS
WORKER_LOST = "the run writing this window ended without finishing (run worker lost); it was retried"


def _translate(fn: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            first = (str(exc.orig or exc).strip().splitlines() or ["unknown error"])[0]
            raise RetryableError(f"control-plane database unavailable: {first}") from exc

    return wrapper


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
    kind: str  # RANGE_PART, LATE_PART, LEGACY_PART, or SUCCESS_MARK (a snapshot's _SUCCESS, number -1)
    status: str  # PART_INTENT (recorded, PUT not known to have landed) or PART_LANDED
    #: Sort key of the part's last row: (recorded_at, id) for events, (id,) for the snapshot.
    last: tuple[str, ...] | None
    rows: int
    size: int
    md5: str | None
    ids: bytes | None  # `writer.pack_ids` form; None for legacy parts and once pruned

    @property
    def landed(self) -> bool:
        return self.status == PART_LANDED


def _part_record(r: Any) -> PartRecord:
    last: tuple[str, ...] | None = None
    if r.last_id is not None:
        last = (r.last_recorded_at, r.last_id) if r.last_recorded_at is not None else (r.last_id,)
    return PartRecord(r.part, r.key, r.kind, r.status, last, r.rows, r.bytes, r.md5, r.ids)


@dataclass(slots=True)
class RotationReport:
    resealed: int = 0
    #: (export id, why its secret did not open), for each row left as it was.
    failed: list[tuple[str, str]] = field(default_factory=list)


def seal_binding(export_id: str, destination: Any) -> SealBinding:
    """A sealed secret opens only for this export's provider, endpoint, bucket and key id."""
    return SealBinding(
        export_id, destination.provider, destination.endpoint, destination.bucket, destination.access_key_id
    )


def location_of(provider: str, endpoint: str | None, bucket: str, prefix: str) -> str:
    material = "\0".join((provider, endpoint or "", bucket, prefix))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def new_export_id() -> str:
    return f"exp_{secrets.token_hex(8)}"


def initial_position(dataset: str, added_at: int) -> int:
    """Events start at the moment they are added; the snapshot at the day it was added."""
    return day_start(added_at) if DATASETS[dataset].is_snapshot else added_at


class ControlPlane:
    def __init__(self, engine: sa.Engine, box: SecretBox) -> None:
        self.engine = engine
        self.box = box

    @_translate
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

    @_translate
    def create_export(
        self,
        *,
        account_id: str,
        destination: DestinationConfig,
        datasets: Iterable[str],
        frequency: str,
        lag_ms: int,
        now_ms: int,
        export_id: str | None = None,
    ) -> ExportRecord:
        export_id = export_id or new_export_id()
        with self.engine.begin() as conn:
            conn.execute(
                exports.insert().values(
                    id=export_id,
                    account_id=account_id,
                    frequency=frequency,
                    lag_ms=lag_ms,
                    status=ACTIVE,
                    created_at=now_ms,
                    updated_at=now_ms,
                    **self._destination_values(export_id, destination),
                )
            )
            for name in datasets:
                self._add_dataset(conn, export_id, name, now_ms)
        return self.get_export(export_id)

    def _destination_values(self, export_id: str, d: DestinationConfig) -> dict[str, Any]:
        return {
            "provider": d.provider,
            "bucket": d.bucket,
            "region": d.region,
            "endpoint": d.endpoint,
            "prefix": d.prefix,
            "access_key_id": d.access_key_id,
            "secret_ciphertext": self.box.encrypt(d.secret_access_key, seal_binding(export_id, d))
            if d.secret_access_key
            else None,
        }

    def _add_dataset(self, conn: sa.Connection, export_id: str, name: str, now_ms: int) -> None:
        conn.execute(
            export_datasets.insert().values(
                export_id=export_id, dataset=name, added_at=now_ms, position_ms=initial_position(name, now_ms)
            )
        )

    @_translate
    def get_export(self, export_id: str, *, include_deleted: bool = True) -> ExportRecord:
        found = self._load(sa.and_(exports.c.id == export_id))
        if not found or (not include_deleted and found[0].status == DELETED):
            raise NotFound(f"export {export_id!r} not found")
        return found[0]

    @_translate
    def list_exports(self, *, account_id: str | None = None, include_deleted: bool = False) -> list[ExportRecord]:
        clauses = []
        if account_id is not None:
            clauses.append(exports.c.account_id == account_id)
        if not include_deleted:
            clauses.append(exports.c.status != DELETED)
        return self._load(sa.and_(sa.true(), *clauses))

    @_translate
    def active_exports(self) -> list[ExportRecord]:
        """Everything the scheduler looks at in one tick: two queries whatever the number of exports."""
        return self._load(exports.c.status == ACTIVE)

    def _load(self, where: sa.ColumnElement[bool]) -> list[ExportRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(exports).where(where).order_by(exports.c.created_at, exports.c.id)).all()
            if not rows:
                return []
            ids = [r.id for r in rows]
            states: dict[str, list[DatasetState]] = {i: [] for i in ids}
            ds_query = (
                sa.select(export_datasets).where(export_datasets.c.removed_at.is_(None)).order_by(export_datasets.c.id)
            )
            if len(ids) < 500:
                ds_query = ds_query.where(export_datasets.c.export_id.in_(ids))
            for d in conn.execute(ds_query):
                if d.export_id in states:
                    states[d.export_id].append(_dataset_state(d))
        order = {name: i for i, name in enumerate(DATASETS)}
        return [
            ExportRecord(
                id=r.id,
                account_id=r.account_id,
                provider=r.provider,
                bucket=r.bucket,
                region=r.region,
                endpoint=r.endpoint,
                prefix=r.prefix,
                access_key_id=r.access_key_id,
                frequency=r.frequency,
                lag_ms=r.lag_ms,
                status=r.status,
                config_version=r.config_version,
                destination_version=r.destination_version,
                export_now_at=r.export_now_at,
                created_at=r.created_at,
                updated_at=r.updated_at,
                deleted_at=r.deleted_at,
                datasets=tuple(sorted(states[r.id], key=lambda s: order[s.dataset])),
            )
            for r in rows
        ]

    @_translate
    def state(self, export_id: str) -> ExportState:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(exports.c.status, exports.c.destination_version).where(exports.c.id == export_id)
            ).first()
        if row is None:
            return ExportState(DELETED, -1)
        return ExportState(row.status, row.destination_version)

    @_translate
    def destination_config(self, export_id: str) -> tuple[DestinationConfig, int]:
        """The destination with its secret decrypted, in memory only, plus its version."""
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(exports).where(exports.c.id == export_id)).first()
        if r is None:
            raise NotFound(f"export {export_id!r} not found")
        secret = self.box.decrypt(r.secret_ciphertext, seal_binding(export_id, r)) if r.secret_ciphertext else None
        config = DestinationConfig(
            provider=r.provider,
            bucket=r.bucket,
            prefix=r.prefix,
            region=r.region,
            endpoint=r.endpoint,
            access_key_id=r.access_key_id,
            secret_access_key=secret,
        )
        return config, r.destination_version

    def _update_export(self, conn: sa.Connection, export_id: str, now_ms: int, **values: Any) -> None:
        result = conn.execute(
            exports.update()
            .where(exports.c.id == export_id)
            .values(config_version=exports.c.config_version + 1, updated_at=now_ms, **values)
        )
        if result.rowcount == 0:
            raise NotFound(f"export {export_id!r} not found")

    @_translate
    def set_status(self, export_id: str, status: str, now_ms: int) -> ExportRecord:
        current = self.get_export(export_id)
        if current.status == DELETED:
            raise ConflictError(f"export {export_id} is deleted; create a new export instead")
        extra: dict[str, Any] = {"deleted_at": now_ms} if status == DELETED else {}
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, status=status, **extra)
        return self.get_export(export_id)

    @_translate
    def add_dataset(self, export_id: str, dataset: str, now_ms: int) -> ExportRecord:
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms)
            self._add_dataset(conn, export_id, dataset, now_ms)
        return self.get_export(export_id)

    @_translate
    def remove_dataset(self, export_id: str, dataset: str, now_ms: int) -> ExportRecord:
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms)
            conn.execute(
                export_datasets.update()
                .where(
                    export_datasets.c.export_id == export_id,
                    export_datasets.c.dataset == dataset,
                    export_datasets.c.removed_at.is_(None),
                )
                .values(removed_at=now_ms)
            )
        return self.get_export(export_id)

    @_translate
    def update_destination(self, export_id: str, destination: DestinationConfig, now_ms: int) -> ExportRecord:
        with self.engine.begin() as conn:
            self._update_export(
                conn,
                export_id,
                now_ms,
                destination_version=exports.c.destination_version + 1,
                **self._destination_values(export_id, destination),
            )
        return self.get_export(export_id)

    @_translate
    def set_frequency(self, export_id: str, frequency: str, now_ms: int) -> ExportRecord:
        """Positions stay: the next window runs from the position to the next point of the new grid."""
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, frequency=frequency)
        return self.get_export(export_id)

    @_translate
    def request_export_now(self, export_id: str, now_ms: int) -> ExportRecord:
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, export_now_at=now_ms)
        return self.get_export(export_id)

    @_translate
    def clear_export_now(self, export_id: str, requested_at: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                exports.update()
                .where(exports.c.id == export_id, exports.c.export_now_at == requested_at)
                .values(export_now_at=None)
            )

    @_translate
    def rotate_secrets(self, progress: Callable[[int, int], None] | None = None) -> RotationReport:
        """Re-seal every stored secret with the primary key and the full binding.

        A row that does not open (its key is gone, or its destination was altered after sealing) is
        reported in ``failed`` and left as it is; the others are re-sealed all the same.
        """
        report = RotationReport()
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(exports)).all()
        for done, r in enumerate(rows, 1):
            if progress is not None:  # `rotate-keys` shows how far it is, over every export
                progress(done, len(rows))
            if r.secret_ciphertext is None or not self.box.needs_rotation(r.secret_ciphertext):
                continue
            try:
                sealed = self.box.reseal(r.secret_ciphertext, seal_binding(r.id, r))
            except SecretKeyError as exc:
                report.failed.append((r.id, exc.message))
                continue
            with self.engine.begin() as conn:
                conn.execute(
                    exports.update()
                    .where(exports.c.id == r.id, exports.c.secret_ciphertext == r.secret_ciphertext)
                    .values(secret_ciphertext=sealed)
                )
            report.resealed += 1
        return report

    @_translate
    def start_window(
        self, export_id: str, dataset: str, window: Window, *, run_id: str | None, location: str, now_ms: int
    ) -> int:
        """Open a ledger attempt. Attempts of the same (export, dataset) still marked running belong to
        a worker that died (SIGKILL, lost node): only one run per export writes at a time. They are
        closed as failed here, so history never shows a run as running forever."""
        with self.engine.begin() as conn:
            conn.execute(
                windows.update()
                .where(windows.c.export_id == export_id, windows.c.dataset == dataset, windows.c.status == RUNNING)
                .values(status=FAILED, error=WORKER_LOST, finished_at=now_ms)
            )
            result = conn.execute(
                windows.insert().values(
                    export_id=export_id,
                    dataset=dataset,
                    date=window.date_key,
                    from_ms=window.from_ms,
                    to_ms=window.to_ms,
                    run_id=run_id,
                    location=location,
                    status=RUNNING,
                    started_at=now_ms,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def _part_number(self, export_id: str, dataset: str, window: Window, location: str) -> sa.ColumnElement[bool]:
        return sa.and_(
            parts.c.export_id == export_id,
            parts.c.dataset == dataset,
            parts.c.from_ms == window.from_ms,
            parts.c.to_ms == window.to_ms,
            parts.c.location == location,
        )

    @_translate
    def window_parts(self, export_id: str, dataset: str, window: Window, location: str) -> list[PartRecord]:
        """The part ledger of one window at one location, by part number."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(parts).where(self._part_number(export_id, dataset, window, location)).order_by(parts.c.part)
            ).all()
        return [_part_record(r) for r in rows]

    @_translate
    def record_part_intent(
        self,
        window_id: int,
        *,
        number: int,
        key: str,
        kind: str,
        last: tuple[str, ...] | None,
        rows: int,
        size: int,
        md5: str,
        ids: bytes,
        now_ms: int,
    ) -> None:
        """Record a part before its PUT: what it will hold and where its rows end.

        A number already in the ledger is only recorded again by an operator's replace; its row is
        then rewritten in place as a new intent.
        """
        with self.engine.begin() as conn:
            w = conn.execute(sa.select(windows).where(windows.c.id == window_id)).one()
            values: dict[str, Any] = {
                "window_id": window_id,
                "key": key,
                "kind": kind,
                "status": PART_INTENT,
                "last_recorded_at": last[0] if last and len(last) > 1 else None,
                "last_id": last[-1] if last else None,
                "rows": rows,
                "bytes": size,
                "md5": md5,
                "ids": ids,
                "written_at": now_ms,
                "landed_at": None,
            }
            where = sa.and_(
                self._part_number(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), w.location),
                parts.c.part == number,
            )
            if conn.execute(parts.update().where(where).values(**values)).rowcount == 0:
                conn.execute(
                    parts.insert().values(
                        export_id=w.export_id,
                        dataset=w.dataset,
                        from_ms=w.from_ms,
                        to_ms=w.to_ms,
                        location=w.location,
                        part=number,
                        **values,
                    )
                )

    @_translate
    def mark_part_landed(self, window_id: int, number: int, now_ms: int) -> None:
        with self.engine.begin() as conn:
            w = conn.execute(sa.select(windows).where(windows.c.id == window_id)).one()
            where = sa.and_(
                self._part_number(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), w.location),
                parts.c.part == number,
            )
            conn.execute(parts.update().where(where).values(status=PART_LANDED, landed_at=now_ms))

    @_translate
    def forget_part_intent(self, window_id: int, number: int) -> None:
        """Drop an intent whose PUT the store definitely refused: nothing landed under its name."""
        with self.engine.begin() as conn:
            w = conn.execute(sa.select(windows).where(windows.c.id == window_id)).one()
            where = sa.and_(
                self._part_number(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), w.location),
                parts.c.part == number,
                parts.c.status == PART_INTENT,
            )
            conn.execute(parts.delete().where(where))

    @_translate
    def prune_part_ids(self, export_id: str, dataset: str, *, before_ms: int) -> int:
        """Drop the ids of committed windows ending before ``before_ms``: late-row detection never
        looks that far back, and the ids are the ledger's only per-row cost. Returns parts pruned."""
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
        with self.engine.begin() as conn:
            return conn.execute(
                parts.update()
                .where(
                    parts.c.export_id == export_id,
                    parts.c.dataset == dataset,
                    parts.c.to_ms < before_ms,
                    parts.c.ids.is_not(None),
                    committed,
                )
                .values(ids=None)
            ).rowcount

    @_translate
    def commit_window(
        self,
        window_id: int,
        *,
        rows: int,
        part_count: int,
        size: int,
        now_ms: int,
        snapshot_taken_at: int | None = None,
    ) -> bool:
        """Mark the window written and, if it continues the chain, advance the position.

        Returns whether the position moved. Both happen in one transaction: the position is never
        ahead of the ledger, and the ledger never claims a window the position has skipped.
        """
        with self.engine.begin() as conn:
            w = conn.execute(sa.select(windows).where(windows.c.id == window_id)).one()
            conn.execute(
                windows.update()
                .where(windows.c.id == window_id)
                .values(
                    status=COMMITTED,
                    rows=rows,
                    parts=part_count,
                    bytes=size,
                    finished_at=now_ms,
                    error=None,
                    snapshot_taken_at=snapshot_taken_at,
                )
            )
            active = sa.and_(
                export_datasets.c.export_id == w.export_id,
                export_datasets.c.dataset == w.dataset,
                export_datasets.c.removed_at.is_(None),
            )
            advanced = conn.execute(
                export_datasets.update()
                .where(active, export_datasets.c.position_ms == w.from_ms)
                .values(position_ms=w.to_ms)
            ).rowcount
            conn.execute(
                export_datasets.update()
                .where(active)
                .values(
                    failures=0,
                    next_retry_at=None,
                    last_error=None,
                    last_error_at=None,
                    last_error_from_ms=None,
                    last_error_to_ms=None,
                )
            )
        return bool(advanced)

    @_translate
    def fail_window(
        self, window_id: int, *, error: str, now_ms: int, count_failure: bool = True, canceled: bool = False
    ) -> DatasetState | None:
        """Record an unfinished attempt.

        ``canceled`` (pause, delete, destination change, terminated run) is not a failure: the ledger
        says canceled and backoff is untouched. A failure is always shown as failed; ``count_failure``
        only says whether it counts for backoff and the last error now (False while the run itself
        still retries a transient error, so one failing run counts once).
        """
        with self.engine.begin() as conn:
            w = conn.execute(sa.select(windows).where(windows.c.id == window_id)).one()
            conn.execute(
                windows.update()
                .where(windows.c.id == window_id)
                .values(status=CANCELED if canceled else FAILED, error=sanitize_error(error), finished_at=now_ms)
            )
        if canceled:
            count_failure = False
        if not count_failure:
            return None
        return self.record_failure(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), error, now_ms)

    @_translate
    def record_failure(
        self, export_id: str, dataset: str, window: Window | None, error: str, now_ms: int
    ) -> DatasetState | None:
        with self.engine.begin() as conn:
            e = conn.execute(sa.select(exports.c.frequency).where(exports.c.id == export_id)).first()
            active = sa.and_(
                export_datasets.c.export_id == export_id,
                export_datasets.c.dataset == dataset,
                export_datasets.c.removed_at.is_(None),
            )
            d = conn.execute(sa.select(export_datasets).where(active)).first()
            if e is None or d is None:
                return None
            failures = d.failures + 1
            conn.execute(
                export_datasets.update()
                .where(active)
                .values(
                    failures=failures,
                    next_retry_at=now_ms + backoff_ms(e.frequency, failures),
                    last_error=sanitize_error(error),
                    last_error_at=now_ms,
                    last_error_from_ms=window.from_ms if window else None,
                    last_error_to_ms=window.to_ms if window else None,
                )
            )
            d = conn.execute(sa.select(export_datasets).where(active)).one()
        return _dataset_state(d)

    @_translate
    def ledger(
        self,
        export_id: str,
        *,
        dataset: str | None = None,
        since_ms: int | None = None,
        date: str | None = None,
    ) -> list[LedgerWindow]:
        query = sa.select(windows).where(windows.c.export_id == export_id)
        if dataset:
            query = query.where(windows.c.dataset == dataset)
        if since_ms is not None:
            query = query.where(windows.c.started_at >= since_ms)
        if date:
            query = query.where(windows.c.date == date)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(windows.c.id)).all()
        return [
            LedgerWindow(
                id=r.id,
                dataset=r.dataset,
                window=Window(r.from_ms, r.to_ms),
                run_id=r.run_id,
                status=r.status,
                rows=r.rows,
                parts=r.parts,
                bytes=r.bytes,
                error=r.error,
                started_at=r.started_at,
                finished_at=r.finished_at,
                snapshot_taken_at=r.snapshot_taken_at,
            )
            for r in rows
        ]

    @_translate
    def committed_at(self, export_id: str, dataset: str, window: Window, location: str) -> bool:
        """Whether the window was ever committed at ``location``."""
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.select(windows.c.id)
                .where(
                    windows.c.export_id == export_id,
                    windows.c.dataset == dataset,
                    windows.c.from_ms == window.from_ms,
                    windows.c.to_ms == window.to_ms,
                    windows.c.location == location,
                    windows.c.status == COMMITTED,
                )
                .limit(1)
            ).first()
        return found is not None

    def committed_windows(self, export_id: str, dataset: str, day: str) -> list[Window]:
        """The distinct windows ever committed on one day: what a backfill of that day checks."""
        return sorted({w.window for w in self.ledger(export_id, dataset=dataset, date=day) if w.status == COMMITTED})

    def history(self, export_id: str, now_ms: int) -> list[RunSummary]:
        """Every run of the last 14 days, newest first, as the customer sees it."""
        runs: dict[str, list[LedgerWindow]] = {}
        for w in self.ledger(export_id, since_ms=now_ms - HISTORY_MS):
            runs.setdefault(w.run_id or f"window-{w.id}", []).append(w)
        summaries = []
        for run_id, ws in runs.items():
            statuses = {w.status for w in ws}
            status = next(s for s in (RUNNING, FAILED, CANCELED, COMMITTED) if s in statuses or s == COMMITTED)
            errors = [w.error for w in ws if w.error]
            finished = [w.finished_at for w in ws if w.finished_at is not None]
            summaries.append(
                RunSummary(
                    run_id=run_id,
                    started_at=min(w.started_at for w in ws),
                    finished_at=max(finished) if finished and RUNNING not in statuses else None,
                    status=status,
                    datasets=tuple(sorted({w.dataset for w in ws})),
                    windows=sum(1 for w in ws if w.status == COMMITTED),
                    rows=sum(w.rows for w in ws if w.status == COMMITTED),
                    files=sum(w.parts for w in ws if w.status == COMMITTED),
                    bytes=sum(w.bytes for w in ws if w.status == COMMITTED),
                    error=errors[-1] if errors else None,
                )
            )
        return sorted(summaries, key=lambda s: s.started_at, reverse=True)


def _dataset_state(d: Any) -> DatasetState:
    window = (
        Window(d.last_error_from_ms, d.last_error_to_ms)
        if d.last_error_from_ms is not None and d.last_error_to_ms is not None
        else None
    )
    return DatasetState(
        dataset=d.dataset,
        added_at=d.added_at,
        position_ms=d.position_ms,
        failures=d.failures,
        next_retry_at=d.next_retry_at,
        last_error=d.last_error,
        last_error_at=d.last_error_at,
        last_error_window=window,
    )


def snapshot_window(day_ms: int) -> Window:
    """The ledger records a snapshot as the whole day it describes."""
    return Window.whole_day(day_of(day_ms))


__all__ = [
    "ControlPlane",
    "DatasetState",
    "ExportRecord",
    "ExportState",
    "LedgerWindow",
    "PartRecord",
    "RunSummary",
    "date_key",
    "day_of",
]
