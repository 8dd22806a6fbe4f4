"""Committing a window's parts to the dataset's Delta table (issue 44; the log's bytes: `delta_log`).

The table at a place is a function of the part ledger there: it holds every landed Parquet part with
rows of every window the runner wrote at that place, each path once, with its latest size. So the
runner calls `commit_window_parts` for every window it writes, after the window's manifest and
before the window commits (`runner.Runner.write_window`, `write_snapshot`), and this module commits
the difference between the window's landed parts and what the table already holds of it:
- new parts (a window's parts, late parts numbered on) are ``add``ed;
- an operator's replace first ``remove``s the window's parts (`remove_window_files`, before its
  first overwrite), and its commit ``add``s the new ones; a part whose content changed otherwise is
  ``add``ed again under its path (the newest ``add`` of a path wins, so it is in the table once);
  one left empty (a part number a new cut no longer needs) is ``remove``d;
- empty parts (a window without rows writes one, DESIGN §4) carry no row and stay out of the table;
- parts stranded at a place the export left (landed there, in no table there) are ``add``ed here
  as table-only files, ``_delta_rows/…``, which the part ledger does not hold (the rows count as
  delivered once, by the part at the old place) and only a replace ``remove``s; so is a window whose
  replace at such a place did not finish, whole (`table_moves`: which rows, and their files).

Order, and why: a commit left by an earlier attempt whose outcome is unknown is sent first, with its
recorded bytes under its version (create-only: a 412 means our own commit had landed: the txn of
that version is ours); then the next version is claimed in the control plane with the files it
changes (`ControlPlane.claim_table_commit`: a version another writer took is lost there and the
commit goes to the next), and sent create-only through the attempt's own write, so the same guard
before every file, endpoint checks, KMS headers and 403 probe apply as to parts. A failure anywhere
leaves the window uncommitted: its retry finds the parts landed, nothing new to send, and the same
commit recorded, and finishes it. No version is ever written twice with other bytes, so the log has
no gap and nothing in it is ever replaced.

A checkpoint follows a commit whose version is a multiple of the interval, in the same call, from
the table's files as recorded at that version; when it fails it is not tried again later (a later
state would not be that version's), and readers simply replay more JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Final

from seqexport_dagster.contract.file_format import PARQUET, format_of_key
from seqexport_dagster.contract.window import Window
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.delivery.delta_log import TableFile
from seqexport_dagster.destination import PutOutcome
from seqexport_dagster.store import SUCCESS_MARK, ControlPlane, ExportRecord, PartRecord
from seqexport_dagster.store.table_log import FileChange, TableFileRecord

Put = Callable[[str, bytes, bool], PutOutcome]
DATE_FOLDER: Final = "date="


def md5_hex(content_md5: str | None) -> str | None:
    """A ``Content-MD5`` (base64) as the hex digest the table log records."""
    return None if content_md5 is None else base64.b64decode(content_md5).hex()


def _date_of(path: str) -> str:
    folder, _, rest = path.partition("/")
    if folder.startswith(DATE_FOLDER):
        return folder[len(DATE_FOLDER) :]
    if folder == delta_log.ROWS_FOLDER:  # a table-only file: ``_delta_rows/YYYY-MM-DD/<name>``
        return rest.split("/", 1)[0]
    raise ValueError(f"{path!r} is not under a date= folder")


def is_table_only(path: str) -> bool:
    """A table-only file (`table_moves.stranded_parts`), not one of the window's parts here."""
    return path.startswith(delta_log.ROWS_FOLDER + "/")


def table_changes(
    prefix: str, dataset: str, window: Window, ledger: list[PartRecord], held: list[TableFileRecord]
) -> list[FileChange]:
    """What a commit must change so the table holds the window's landed, non-empty Parquet parts."""
    current = {f.path: f for f in held}
    out: list[FileChange] = []
    wanted: set[str] = set()
    for p in sorted(ledger, key=lambda p: p.number):
        if not p.landed or p.kind == SUCCESS_MARK or format_of_key(p.key) != PARQUET:
            continue
        path = delta_log.relative_path(prefix, dataset, p.key)
        md5 = md5_hex(p.md5)
        if p.rows == 0:
            continue
        wanted.add(path)
        f = current.get(path)
        if f is None or f.removed or f.bytes != p.size or f.md5 != md5 or f.rows != p.rows:
            out.append(FileChange(path, window.from_ms, window.to_ms, p.size, p.rows, md5, removed=False))
    for path, f in current.items():
        # A table-only file carries rows of a part at an earlier place (`table_moves.stranded_parts`), which no
        # part here holds: it stays until an operator's replace (`remove_window_files`).
        if not f.removed and path not in wanted and not is_table_only(path):
            out.append(FileChange(path, f.from_ms, f.to_ms, f.bytes, f.rows, f.md5, removed=True))
    return out


def _table_file(c: FileChange | TableFileRecord) -> TableFile:
    return TableFile(c.path, _date_of(c.path), c.bytes, c.rows, c.from_ms, c.to_ms)


def _flush(store: ControlPlane, put: Put, export_id: str, dataset: str, location: str) -> None:
    """Send what an earlier attempt left unsent or of unknown outcome, with its recorded bytes."""
    for pending in store.unlanded_table_commits(export_id, dataset, location):
        assert pending.body is not None
        put(pending.key, pending.body, False)  # EXISTED: our own commit of an earlier attempt landed
        store.mark_table_commit_landed(export_id, dataset, location, pending.version)


def _commit(
    store: ControlPlane,
    put: Put,
    changes: list[FileChange],
    *,
    export: ExportRecord,
    location: str,
    prefix: str,
    dataset: str,
    window_id: int,
    now_ms: int,
    checkpoint_interval: int,
) -> int:
    table = delta_log.table_id(export.id, dataset, location)

    def body_of(version: int) -> bytes:
        return delta_log.commit_body(
            version=version,
            dataset=dataset,
            table=table,
            app_id=export.id,
            txn=window_id,
            adds=[_table_file(c) for c in changes if not c.removed],
            removes=[_table_file(c) for c in changes if c.removed],
            now_ms=now_ms,
        )

    commit = store.claim_table_commit(
        export.id,
        dataset,
        location,
        txn=window_id,
        changes=changes,
        key_of=lambda v: delta_log.commit_key(prefix, dataset, v),
        body_of=body_of,
        now_ms=now_ms,
    )
    assert commit.body is not None
    put(commit.key, commit.body, False)
    store.mark_table_commit_landed(export.id, dataset, location, commit.version)
    if checkpoint_interval and commit.version and commit.version % checkpoint_interval == 0:
        live = [f for f in store.table_files(export.id, dataset, location) if not f.removed]
        body = delta_log.checkpoint_body(
            dataset=dataset,
            table=table,
            app_id=export.id,
            txn=window_id,
            txn_ms=now_ms,
            files=[_table_file(f) for f in live],
            file_ms=now_ms,
        )
        put(delta_log.checkpoint_key(prefix, dataset, commit.version), body, False)
    return commit.version


def commit_window_parts(
    store: ControlPlane,
    put: Put,
    *,
    export: ExportRecord,
    location: str,
    prefix: str,
    dataset: str,
    window: Window,
    window_id: int,
    now_ms: int,
    checkpoint_interval: int = delta_log.CHECKPOINT_INTERVAL,
    carried: Sequence[FileChange] = (),
) -> int | None:
    """Commit what the table lacks of the window at this place; the version written, or None.
    ``carried``: table-only files already written here (`table_moves.stranded_parts`), added by the same commit."""
    if export.table != delta_log.DELTA:
        return None
    _flush(store, put, export.id, dataset, location)
    ledger = store.window_parts(export.id, dataset, window, location)
    held = store.table_files(export.id, dataset, location, from_ms=window.from_ms, to_ms=window.to_ms)
    changes = [*table_changes(prefix, dataset, window, ledger, held), *carried]
    if not changes:
        return None
    return _commit(
        store,
        put,
        changes,
        export=export,
        location=location,
        prefix=prefix,
        dataset=dataset,
        window_id=window_id,
        now_ms=now_ms,
        checkpoint_interval=checkpoint_interval,
    )


def remove_window_files(
    store: ControlPlane,
    put: Put,
    *,
    export: ExportRecord,
    location: str,
    prefix: str,
    dataset: str,
    window: Window,
    window_id: int,
    now_ms: int,
) -> int | None:
    """Before an operator's replace overwrites the window's parts here: a commit that ``remove``s
    them, so no reader ever reads an overwritten file by the size of its old ``add`` (sim seed
    30000003: a replace left unfinished at a place the export then left made that table unreadable).
    The replace's own commit adds the new parts back; one that never finishes leaves the window out
    of this place's table, which stays readable."""
    if export.table != delta_log.DELTA:
        return None
    _flush(store, put, export.id, dataset, location)
    held = store.table_files(export.id, dataset, location, from_ms=window.from_ms, to_ms=window.to_ms)
    changes = [
        FileChange(f.path, f.from_ms, f.to_ms, f.bytes, f.rows, f.md5, removed=True) for f in held if not f.removed
    ]
    if not changes:
        return None
    return _commit(
        store,
        put,
        changes,
        export=export,
        location=location,
        prefix=prefix,
        dataset=dataset,
        window_id=window_id,
        now_ms=now_ms,
        checkpoint_interval=0,
    )
