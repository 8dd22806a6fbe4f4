"""The export registry: creating, reading and changing exports, their datasets and sealed secrets.

Secrets are stored sealed (`SecretBox`, bound by `seal_binding`) and only `destination_config`
returns one decrypted. Every change bumps the export's config version; a change of bucket, prefix,
endpoint or keys also bumps its destination version, which a run re-reads before every file.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, FileFormat, parse_format
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import day_start
from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.errors import ConflictError, NotFound, SecretKeyError
from seqexport_dagster.store.crypto import SealBinding, SecretBox
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.lifecycle_events import on_status
from seqexport_dagster.store.prepared import Prepared, PreparedIn, fetch, first
from seqexport_dagster.store.records import (
    ACTIVE,
    DELETED,
    DatasetState,
    ExportLifecycle,
    ExportRecord,
    ExportState,
    RotationReport,
    dataset_state_of,
)
from seqexport_dagster.store.tables import export_datasets, exports


def seal_binding(export_id: str, destination: Any) -> SealBinding:
    """A sealed secret opens only for this export's provider, endpoint, bucket and key id."""
    return SealBinding(
        export_id, destination.provider, destination.endpoint, destination.bucket, destination.access_key_id
    )


def new_export_id() -> str:
    return f"exp_{secrets.token_hex(8)}"


def initial_position(dataset: str, added_at: int) -> int:
    """Events start at the moment they are added; the snapshot at the day it was added."""
    return day_start(added_at) if DATASETS[dataset].is_snapshot else added_at


def _ordered(query: sa.Select[Any]) -> sa.Select[Any]:
    return query.order_by(exports.c.created_at, exports.c.id)


# The hot reads, built once: a run reads its export before every window and part, the sensor the
# fleet every tick, and building a statement and its cache key costs more Python than SQLite
# takes to run it (the simulator's profile). Parameters are prefixed so they never clash with a
# column name.
# Each is also compiled once per database (`Prepared`): SQLAlchemy's execute costs several times
# what SQLite takes to run such a read.
_BY_ID = Prepared(_ordered(sa.select(exports).where(exports.c.id == sa.bindparam("b_export_id"))))
_NOT_DELETED = Prepared(_ordered(sa.select(exports).where(exports.c.status != DELETED)))
_ACTIVE = Prepared(_ordered(sa.select(exports).where(exports.c.status == ACTIVE)))
_ALL = Prepared(_ordered(sa.select(exports)))
_OF_ACCOUNT_ALL_QUERY = _ordered(sa.select(exports).where(exports.c.account_id == sa.bindparam("b_account_id")))
_OF_ACCOUNT_ALL = Prepared(_OF_ACCOUNT_ALL_QUERY)
_OF_ACCOUNT = Prepared(_OF_ACCOUNT_ALL_QUERY.where(exports.c.status != DELETED))
_ALL_DATASETS_QUERY = (
    sa.select(export_datasets).where(export_datasets.c.removed_at.is_(None)).order_by(export_datasets.c.id)
)
_ALL_DATASETS = Prepared(_ALL_DATASETS_QUERY)
#: Of some exports (the sensor's tick, `list_exports`): prepared for each number of exports.
_DATASETS_OF = PreparedIn("b_id", lambda ids: _ALL_DATASETS_QUERY.where(export_datasets.c.export_id.in_(ids)))
#: Of one export (`get_export`): an IN list is rendered anew on every call, an equality is not.
_DATASETS_OF_ONE = Prepared(_ALL_DATASETS_QUERY.where(export_datasets.c.export_id == sa.bindparam("b_export_id")))
_STATE = Prepared(
    sa.select(exports.c.status, exports.c.destination_version).where(exports.c.id == sa.bindparam("b_export_id"))
)
_EXPORT_ROW = Prepared(sa.select(exports).where(exports.c.id == sa.bindparam("b_export_id")))


#: An export's datasets in `DATASETS` order, as `ExportRecord.datasets` lists them.
_DATASET_ORDER: Final = {name: i for i, name in enumerate(DATASETS)}


class ExportStore:
    """Exports and their datasets. Mixed into `ControlPlane`; the ledger lives in `LedgerStore`."""

    def __init__(self, engine: sa.Engine, box: SecretBox) -> None:
        self.engine = engine
        self.box = box

    @translate_errors
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
        file_format: FileFormat = DEFAULT_FORMAT,
        table: str | None = None,
    ) -> ExportRecord:
        export_id = export_id or new_export_id()
        with self.engine.begin() as conn:
            conn.execute(
                exports.insert().values(
                    id=export_id,
                    account_id=account_id,
                    frequency=frequency,
                    format=file_format,
                    table_format=table,
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
            "sse": d.sse,
            "kms_key_id": d.kms_key_id,
            "role_arn": d.role_arn,
            "external_id": d.external_id,
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

    @translate_errors
    def get_export(self, export_id: str, *, include_deleted: bool = True) -> ExportRecord:
        found = self._load(_BY_ID, {"b_export_id": export_id})
        if not found or (not include_deleted and found[0].status == DELETED):
            raise NotFound(f"export {export_id!r} not found")
        return found[0]

    @translate_errors
    def list_exports(self, *, account_id: str | None = None, include_deleted: bool = False) -> list[ExportRecord]:
        if account_id is None:
            return self._load(_ALL if include_deleted else _NOT_DELETED)
        return self._load(_OF_ACCOUNT_ALL if include_deleted else _OF_ACCOUNT, {"b_account_id": account_id})

    @translate_errors
    def active_exports(self) -> list[ExportRecord]:
        """Everything the scheduler looks at in one tick: two queries whatever the number of exports."""
        return self._load(_ACTIVE)

    def _load(self, query: Prepared, params: dict[str, Any] | None = None) -> list[ExportRecord]:
        """The exports ``query`` selects (in its order), each with its datasets."""
        with self.engine.connect() as conn:
            rows = fetch(conn, query, params)
            if not rows:
                return []
            # Read through the rows' mappings: ``row.name`` is several times slower (`records`).
            found = [r._mapping for r in rows]
            ids = [r["id"] for r in found]
            states: dict[str, list[DatasetState]] = {i: [] for i in ids}
            if len(ids) == 1:
                datasets = fetch(conn, _DATASETS_OF_ONE, {"b_export_id": ids[0]})
            elif len(ids) < 500:
                datasets = fetch(conn, *_DATASETS_OF.bind(ids, {}))
            else:
                datasets = fetch(conn, _ALL_DATASETS)
            for d in datasets:
                of = states.get(d._mapping["export_id"])
                if of is not None:
                    of.append(dataset_state_of(d))
        return [
            ExportRecord(
                id=r["id"],
                account_id=r["account_id"],
                provider=r["provider"],
                bucket=r["bucket"],
                region=r["region"],
                endpoint=r["endpoint"],
                prefix=r["prefix"],
                access_key_id=r["access_key_id"],
                frequency=r["frequency"],
                lag_ms=r["lag_ms"],
                status=r["status"],
                config_version=r["config_version"],
                destination_version=r["destination_version"],
                export_now_at=r["export_now_at"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                deleted_at=r["deleted_at"],
                sse=r["sse"],
                kms_key_id=r["kms_key_id"],
                role_arn=r["role_arn"],
                external_id=r["external_id"],
                datasets=tuple(sorted(states[r["id"]], key=lambda s: _DATASET_ORDER[s.dataset])),
                format=parse_format(r["format"]),
                table=r["table_format"],
            )
            for r in found
        ]

    @translate_errors
    def state(self, export_id: str) -> ExportState:
        with self.engine.connect() as conn:
            row = first(conn, _STATE, {"b_export_id": export_id})
        if row is None:
            return ExportState(DELETED, -1)
        return ExportState(row.status, row.destination_version)

    @translate_errors
    def destination_config(self, export_id: str) -> tuple[DestinationConfig, int]:
        """The destination with its secret decrypted, in memory only, plus its version."""
        with self.engine.connect() as conn:
            r = first(conn, _EXPORT_ROW, {"b_export_id": export_id})
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
            sse=r.sse,
            kms_key_id=r.kms_key_id,
            role_arn=r.role_arn,
            external_id=r.external_id,
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

    @translate_errors
    def set_status(self, export_id: str, status: ExportLifecycle, now_ms: int) -> ExportRecord:
        current = self.get_export(export_id)
        if current.status == DELETED:
            raise ConflictError(f"export {export_id} is deleted; create a new export instead")
        extra: dict[str, Any] = {"deleted_at": now_ms} if status == DELETED else {}
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, status=status, **extra)
            if status != current.status:  # webhooks: in the same transaction, once per change
                on_status(conn, export_id, status, now_ms)
        return self.get_export(export_id)

    @translate_errors
    def add_dataset(self, export_id: str, dataset: str, now_ms: int) -> ExportRecord:
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms)
            self._add_dataset(conn, export_id, dataset, now_ms)
        return self.get_export(export_id)

    @translate_errors
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

    @translate_errors
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

    @translate_errors
    def set_frequency(self, export_id: str, frequency: str, now_ms: int) -> ExportRecord:
        """Positions stay: the next window runs from the position to the next point of the new grid."""
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, frequency=frequency)
        return self.get_export(export_id)

    @translate_errors
    def set_format(self, export_id: str, file_format: FileFormat, now_ms: int) -> ExportRecord:
        """Windows started before keep their format (`file_format.window_format`); new ones use this."""
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, format=file_format)
        return self.get_export(export_id)

    @translate_errors
    def set_table(self, export_id: str, table: str | None, now_ms: int) -> ExportRecord:
        """A table (``delta``) from each dataset's next commit on, or none: the log written stays."""
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, table_format=table)
        return self.get_export(export_id)

    @translate_errors
    def request_export_now(self, export_id: str, now_ms: int) -> ExportRecord:
        """Save the request, and let a failing dataset make ONE immediate attempt: its wait is lifted
        (its failure count and last error stay). If that attempt fails, the failure sets the next
        retry time again and the normal backoff applies; nothing else skips the wait."""
        with self.engine.begin() as conn:
            self._update_export(conn, export_id, now_ms, export_now_at=now_ms)
            conn.execute(
                export_datasets.update()
                .where(export_datasets.c.export_id == export_id, export_datasets.c.removed_at.is_(None))
                .values(next_retry_at=None)
            )
        return self.get_export(export_id)

    @translate_errors
    def clear_export_now(self, export_id: str, requested_at: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                exports.update()
                .where(exports.c.id == export_id, exports.c.export_now_at == requested_at)
                .values(export_now_at=None)
            )

    @translate_errors
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
