"""The Delta log each table-keeping export wrote, per (export, dataset, location) (issue 44).

The exporter never reads the bucket (PutObject only), so the table's next version and its files are
known from here. `claim_commit` takes the next version in one transaction with the files it adds
and removes: the unique (export, dataset, location, version) makes two writers racing for a version
resolve here, as a create-only PUT of the same name would in the bucket (the loser re-reads and
takes the next). The body is kept until the PUT landed: a commit of unknown outcome is sent again
with the same bytes, so a 412 on it means our own commit had landed.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import Window
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.late_parts import _range_params, open_attempts_in_range
from seqexport_dagster.store.records import PART_LANDED
from seqexport_dagster.store.tables import parts, table_commits, table_files, windows


@dataclass(frozen=True, slots=True)
class TableCommit:
    version: int
    key: str
    txn: int
    size: int
    landed: bool
    body: builtins.bytes | None


@dataclass(frozen=True, slots=True)
class TableFileRecord:
    path: str
    from_ms: int
    to_ms: int
    bytes: int
    rows: int
    md5: str | None
    version: int
    removed: bool


@dataclass(frozen=True, slots=True)
class FileChange:
    """A file a commit adds (``removed`` False) or removes, as recorded with it."""

    path: str
    from_ms: int
    to_ms: int
    bytes: int
    rows: int
    md5: str | None
    removed: bool


class TableLogStore:
    """Mixed into `ControlPlane`."""

    engine: sa.Engine

    def _here(self, t: sa.Table, export_id: str, dataset: str, location: str) -> sa.ColumnElement[bool]:
        return sa.and_(t.c.export_id == export_id, t.c.dataset == dataset, t.c.location == location)

    @translate_errors
    def table_commits(self, export_id: str, dataset: str, location: str) -> list[TableCommit]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    table_commits.c.version,
                    table_commits.c.key,
                    table_commits.c.txn,
                    table_commits.c.bytes,
                    table_commits.c.landed,
                    table_commits.c.body,
                )
                .where(self._here(table_commits, export_id, dataset, location))
                .order_by(table_commits.c.version)
            ).all()
        return [TableCommit(int(r[0]), r[1], int(r[2]), int(r[3]), bool(r[4]), r[5]) for r in rows]

    @translate_errors
    def unlanded_table_commits(self, export_id: str, dataset: str, location: str) -> list[TableCommit]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    table_commits.c.version,
                    table_commits.c.key,
                    table_commits.c.txn,
                    table_commits.c.bytes,
                    table_commits.c.body,
                )
                .where(self._here(table_commits, export_id, dataset, location), table_commits.c.landed.is_(False))
                .order_by(table_commits.c.version)
            ).all()
        return [TableCommit(int(r[0]), r[1], int(r[2]), int(r[3]), False, r[4]) for r in rows]

    @translate_errors
    def table_files(
        self, export_id: str, dataset: str, location: str, *, from_ms: int | None = None, to_ms: int | None = None
    ) -> list[TableFileRecord]:
        """The table's files (of one window when its bounds are given), live and removed."""
        t = table_files
        where = [self._here(t, export_id, dataset, location)]
        if from_ms is not None and to_ms is not None:
            where += [t.c.from_ms == from_ms, t.c.to_ms == to_ms]
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.c.path, t.c.from_ms, t.c.to_ms, t.c.bytes, t.c.rows, t.c.md5, t.c.version, t.c.removed)
                .where(*where)
                .order_by(t.c.version, t.c.path)
            ).all()
        return [
            TableFileRecord(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5], int(r[6]), bool(r[7])) for r in rows
        ]

    @translate_errors
    def table_files_everywhere(
        self, export_id: str, dataset: str, from_ms: int, to_ms: int
    ) -> dict[str, list[TableFileRecord]]:
        """The table files of one window at every place, by location, and each place's versions
        whose commit has not landed (`table_moves.stranded_parts` reads both in one go)."""
        t = table_files
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    t.c.location,
                    t.c.path,
                    t.c.from_ms,
                    t.c.to_ms,
                    t.c.bytes,
                    t.c.rows,
                    t.c.md5,
                    t.c.version,
                    t.c.removed,
                )
                .where(t.c.export_id == export_id, t.c.dataset == dataset, t.c.from_ms == from_ms, t.c.to_ms == to_ms)
                .order_by(t.c.location, t.c.version, t.c.path)
            ).all()
        found: dict[str, list[TableFileRecord]] = {}
        for r in rows:
            found.setdefault(r[0], []).append(
                TableFileRecord(r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5]), r[6], int(r[7]), bool(r[8]))
            )
        return found

    @translate_errors
    def unlanded_table_versions(self, export_id: str, dataset: str, location: str) -> set[int]:
        """The versions at ``location`` whose commit was claimed and never marked landed."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(table_commits.c.version).where(
                    self._here(table_commits, export_id, dataset, location), table_commits.c.landed.is_(False)
                )
            ).all()
        return {int(r[0]) for r in rows}

    @translate_errors
    def windows_landed_elsewhere_unsettled(
        self, export_id: str, dataset: str, location: str, until_ms: int, *, after_ms: int
    ) -> list[Window]:
        """Windows ending in ``(after_ms, until_ms]`` with a part that landed, with rows, at a place
        other than ``location`` under an attempt no commit there followed, or whose replace there
        no commit followed (it took the window out of that table first): the windows whose rows a
        place the export left may hold in no table (`delivery.table_moves.table_carry` decides). A
        reconciliation pass of an export that keeps a table checks them whatever their recheck age:
        the move may come after the window's last one."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                _LANDED_ELSEWHERE_UNSETTLED, _range_params(export_id, dataset, location, after_ms, until_ms)
            ).all()
        return sorted(Window(r.from_ms, r.to_ms) for r in rows)

    @translate_errors
    def claim_table_commit(
        self,
        export_id: str,
        dataset: str,
        location: str,
        *,
        txn: int,
        changes: Sequence[FileChange],
        key_of: Callable[[int], str],
        body_of: Callable[[int], bytes],
        now_ms: int,
        attempts: int = 5,
    ) -> TableCommit:
        """Take the table's next version for a commit of ``changes`` (``body_of(version)`` its bytes),
        with the files it adds and removes, in one transaction; a version another writer took in the
        meantime is lost here (unique constraint), and the commit goes to the next."""
        for _ in range(attempts):
            try:
                with self.engine.begin() as conn:
                    top = conn.execute(
                        sa.select(sa.func.max(table_commits.c.version)).where(
                            self._here(table_commits, export_id, dataset, location)
                        )
                    ).scalar()
                    version = 0 if top is None else int(top) + 1
                    body = body_of(version)
                    key = key_of(version)
                    conn.execute(
                        table_commits.insert().values(
                            export_id=export_id,
                            dataset=dataset,
                            location=location,
                            version=version,
                            txn=txn,
                            key=key,
                            body=body,
                            bytes=len(body),
                            landed=False,
                            created_at=now_ms,
                        )
                    )
                    for c in changes:
                        values = {
                            "from_ms": c.from_ms,
                            "to_ms": c.to_ms,
                            "bytes": c.bytes,
                            "rows": c.rows,
                            "md5": c.md5,
                            "version": version,
                            "removed": c.removed,
                        }
                        done = conn.execute(
                            table_files.update()
                            .where(self._here(table_files, export_id, dataset, location), table_files.c.path == c.path)
                            .values(**values)
                        )
                        if done.rowcount == 0:
                            conn.execute(
                                table_files.insert().values(
                                    export_id=export_id, dataset=dataset, location=location, path=c.path, **values
                                )
                            )
                return TableCommit(version, key, txn, len(body), False, body)
            except sa.exc.IntegrityError:
                continue  # another writer took that version: re-read, take the next
        raise sa.exc.OperationalError("claim table commit", {}, Exception("kept losing the race for a version"))

    @translate_errors
    def mark_table_commit_landed(self, export_id: str, dataset: str, location: str, version: int) -> None:
        """The commit is in the bucket: its body is no longer needed here."""
        with self.engine.begin() as conn:
            conn.execute(
                table_commits.update()
                .where(self._here(table_commits, export_id, dataset, location), table_commits.c.version == version)
                .values(landed=True, body=None)
            )


def _landed_elsewhere_unsettled() -> sa.Select[Any]:
    """An attempt whose landed part no commit at its place followed is itself not committed, and so
    is a replace left unfinished: read from the partial index of attempts not committed
    (`open_attempts_in_range`), a small part of the ledger, not from every part of the range (2.3 ms
    a pass for 7 days of a moved 15-minute export)."""
    w = windows
    landed = sa.exists().where(parts.c.window_id == w.c.id, parts.c.status == PART_LANDED, parts.c.rows > 0)
    return open_attempts_in_range(w.c.location != sa.bindparam("here"), sa.or_(landed, w.c.replacing.is_(True)))


_LANDED_ELSEWHERE_UNSETTLED: Final = _landed_elsewhere_unsettled()
