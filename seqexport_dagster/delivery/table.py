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
- parts stranded at a place the export left (landed there, in no table there: `stranded_parts`) are
  ``add``ed here as table-only files, ``_delta_rows/…``, which the part ledger does not hold (the
  rows count as delivered once, by the part at the old place) and only a replace ``remove``s; so is
  a window whose replace at such a place did not finish, whole (`table_carry`, `replaced_rows`).

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
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.file_format import PARQUET, format_of_key
from seqexport_dagster.contract.keys import SNAPSHOT_DATASET
from seqexport_dagster.contract.window import Window
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.delivery.delta_log import TableFile
from seqexport_dagster.delivery.writer import unpack_ids
from seqexport_dagster.destination import PutOutcome
from seqexport_dagster.store import SUCCESS_MARK, ControlPlane, ExportRecord, PartRecord
from seqexport_dagster.store.table_log import FileChange, TableFileRecord

Put = Callable[[str, bytes, bool], PutOutcome]
DATE_FOLDER: Final = "date="


def _md5_hex(content_md5: str | None) -> str | None:
    return None if content_md5 is None else base64.b64decode(content_md5).hex()


def _date_of(path: str) -> str:
    folder, _, rest = path.partition("/")
    if folder.startswith(DATE_FOLDER):
        return folder[len(DATE_FOLDER) :]
    if folder == delta_log.ROWS_FOLDER:  # a table-only file: ``_delta_rows/YYYY-MM-DD/<name>``
        return rest.split("/", 1)[0]
    raise ValueError(f"{path!r} is not under a date= folder")


def is_table_only(path: str) -> bool:
    """A table-only file (`stranded_parts`), not one of the window's parts here."""
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
        md5 = _md5_hex(p.md5)
        if p.rows == 0:
            continue
        wanted.add(path)
        f = current.get(path)
        if f is None or f.removed or f.bytes != p.size or f.md5 != md5 or f.rows != p.rows:
            out.append(FileChange(path, window.from_ms, window.to_ms, p.size, p.rows, md5, removed=False))
    for path, f in current.items():
        # A table-only file carries rows of a part at an earlier place (`stranded_parts`), which no
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
    ``carried``: table-only files already written here (`stranded_parts`), added by the same commit."""
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


#: The name of a table-only file of `ReplacedRows`: ``<dataset>-<fromMs>-<toMs>-r<digest>-NNNN.parquet``.
REPLACED_INFIX: Final = "-r"


@dataclass(frozen=True, slots=True)
class Stranded:
    """A part of the window landed at an earlier place, in no table: its rows go into the table
    here as a table-only file at ``path`` (relative to the table's root)."""

    part: PartRecord
    path: str


def stranded_parts(
    store: ControlPlane,
    export: ExportRecord,
    dataset: str,
    window: Window,
    here: str,
    found: dict[str, list[PartRecord]] | None = None,
) -> list[Stranded]:
    """Parts of ``window`` that landed at a place the export left, with rows no table holds: the
    attempt that landed them ended before the commit there (its table commit failed, or its worker
    died after the PUT), and the export moved before a retry (long run #12 seed 40000120). Their
    rows count as delivered (the files there hold them), so no late part brings them here, and
    nothing is ever written at the old place again. The table here takes them instead, as
    table-only files (`delta_log.ROWS_FOLDER`) that no file loader sees.

    A part counts when, by the control plane: it landed with rows, in Parquet, under an attempt no
    commit of the window at its place followed (a committed window is in that table, unless the
    table was off, which leaves it out on purpose); that place's table has no ``add`` of it, or one
    whose commit never landed (its outcome unknown: see docs/customers.md, "Moves"); no replace is
    unfinished there (`table_carry` takes that window whole); no place's table carries it already
    (a second move carries it once); and no landed part here holds any of its rows (a whole copy
    here, an operator's replace, is in this table already). ``found``: the window's parts by place,
    when the caller has read them (`ControlPlane.parts_everywhere`)."""
    if export.table != delta_log.DELTA or dataset == SNAPSHOT_DATASET:
        return []
    if found is None:
        found = store.parts_everywhere(export.id, dataset, window, here=here)
    candidates: dict[str, list[PartRecord]] = {}
    for place, parts in found.items():
        if place == here:
            continue
        landed = [
            p
            for p in parts
            if p.landed
            and p.rows
            and p.ids is not None
            and p.attempt
            and p.kind != SUCCESS_MARK
            and format_of_key(p.key) == PARQUET
        ]
        if not landed:
            continue
        last = store.last_commit_id(export.id, dataset, window, place)
        newer = [p for p in landed if last is None or p.attempt is not None and p.attempt > last]
        if newer and not store.replace_unfinished(export.id, dataset, window, place):
            candidates[place] = newer
    if not candidates:
        return []
    files = store.table_files_everywhere(export.id, dataset, window.from_ms, window.to_ms)
    unlanded = {
        place: store.unlanded_table_versions(export.id, dataset, place) if place != here else set()
        for place in {*candidates, *files}
    }
    # Carried into a table already: here (an unlanded commit here is sent again by the next one), or
    # at another place the export left whose commit landed (one of unknown outcome there is treated
    # as not landed, like the stranded part's own: see below).
    if any(not f.removed and _is_replaced(f.path, window, dataset) for f in files.get(here, [])):
        return []  # this table took the window whole (`ReplacedRows`, an export that moved back)
    carried = {
        f.path
        for place, records in files.items()
        for f in records
        if is_table_only(f.path) and f.version not in unlanded[place]
    }
    ours = {i for p in found.get(here, []) if p.landed and p.ids for i in unpack_ids(p.ids)}
    out: list[Stranded] = []
    for place, parts in sorted(candidates.items()):
        there = {f.path: f for f in files.get(place, [])}
        for p in parts:
            in_place = "/".join(p.key.split("/")[-2:])  # date=YYYY-MM-DD/<name>, the path there
            f = there.get(in_place)
            if f is not None and (f.removed or f.version not in unlanded[place]):
                continue  # in that table (or taken out of it by a replace)
            path = delta_log.rows_path(window.date_key, p.key.rsplit("/", 1)[-1])
            if path in carried or not ours.isdisjoint(unpack_ids(p.ids or b"")):
                continue
            out.append(Stranded(p, path))
    return out


@dataclass(frozen=True, slots=True)
class ReplacedRows:
    """The rows of a window whose replace at a place the export left did not finish, to be cut
    here by id into table-only files ``<stem>-NNNN.parquet`` (`delta_log.ROWS_FOLDER`)."""

    ids: frozenset[str]
    #: ``<dataset>-<fromMs>-<toMs>-r<digest>``: the digest names the set of rows, so a name always
    #: holds the same bytes (event rows do not change), whichever attempt cuts it.
    stem: str

    def path(self, window: Window, number: int) -> str:
        return delta_log.rows_path(window.date_key, f"{self.stem}-{number:04d}.parquet")


@dataclass(frozen=True, slots=True)
class Carry:
    """What the table here takes of a window from places the export left (`table_carry`)."""

    parts: list[Stranded]
    replaced: ReplacedRows | None = None

    def __bool__(self) -> bool:
        return bool(self.parts) or self.replaced is not None


def table_carry(
    store: ControlPlane,
    export: ExportRecord,
    dataset: str,
    window: Window,
    here: str,
    found: dict[str, list[PartRecord]] | None = None,
) -> Carry:
    """The rows of ``window`` the table here takes because no table at a place the export left
    holds them: parts stranded there (`stranded_parts`), or, where an operator's replace of the
    window at such a place did not finish, the window whole (`replaced_rows`).

    That replace committed the ``remove`` of the window's files from that table before its first
    overwrite, and the export moved before a run there finished it (nothing is written at a place
    the export left): the window is in no table there, and its rows count as delivered, so no late
    part brings them here (long run #13 seeds 53000044, 53000047). The table here then takes the
    window as the replace would have left it in the table there: every row of the window's landed
    parts at the places the export left, each once (the replace's new parts and the old parts it
    had not reached hold some rows twice; a set of ids does not), cut here by id. Stranded parts
    of the window are then among those rows, not carried apart. Rows of a part still at intent
    there count as late here and go out as late parts, in this table too."""
    if export.table != delta_log.DELTA or dataset == SNAPSHOT_DATASET:
        return Carry([])
    if found is None:
        found = store.parts_everywhere(export.id, dataset, window, here=here)
    others = [
        place
        for place, parts in found.items()
        if place != here and any(p.landed and p.rows and format_of_key(p.key) == PARQUET for p in parts)
    ]
    if not others or not store.places_replace_unfinished(export.id, dataset, window).intersection(others):
        return Carry(stranded_parts(store, export, dataset, window, here, found))
    return Carry([], replaced_rows(store, export, dataset, window, here, found))


def replaced_rows(
    store: ControlPlane,
    export: ExportRecord,
    dataset: str,
    window: Window,
    here: str,
    found: dict[str, list[PartRecord]],
) -> ReplacedRows | None:
    """The rows `table_carry` cuts here for a replace left unfinished at a place the export left;
    None when a table holds them already: here (a whole copy of the window here, a backfill's or a
    replace's, or an earlier carry, its commit sent again if its outcome is unknown) or at another
    place the export left (a second move carries them once), or when the ledger there no longer
    says which rows it holds (ids pruned)."""
    ids: set[str] = set()
    for place, parts in found.items():
        for p in parts:
            if place == here or not p.landed or not p.rows or p.kind == SUCCESS_MARK:
                continue
            if format_of_key(p.key) != PARQUET:
                continue
            if p.ids is None:
                return None
            ids.update(unpack_ids(p.ids))
    if not ids:
        return None
    if not ids.isdisjoint(i for p in found.get(here, []) if p.landed and p.ids for i in unpack_ids(p.ids)):
        return None  # a whole copy here is in this table
    files = store.table_files_everywhere(export.id, dataset, window.from_ms, window.to_ms)
    for place, records in files.items():
        unlanded = store.unlanded_table_versions(export.id, dataset, place) if place != here else set()
        if any(not f.removed and _is_replaced(f.path, window, dataset) and f.version not in unlanded for f in records):
            return None
    # Parts stranded elsewhere that this table took before (an export that left here and came back):
    # their rows are in it already. One whose origin the ledger no longer names is not cut twice.
    origins = {
        (p.key.rsplit("/", 1)[-1], _md5_hex(p.md5)): p for place, ps in found.items() if place != here for p in ps
    }
    for f in files.get(here, []):
        if f.removed or not is_table_only(f.path) or _is_replaced(f.path, window, dataset):
            continue
        origin = origins.get((f.path.rsplit("/", 1)[-1], f.md5))
        if origin is None or origin.ids is None:
            return None
        ids.difference_update(unpack_ids(origin.ids))
    if not ids:
        return None
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12]
    return ReplacedRows(frozenset(ids), f"{dataset}-{window.from_ms}-{window.to_ms}{REPLACED_INFIX}{digest}")


def _is_replaced(path: str, window: Window, dataset: str) -> bool:
    """A table-only file of `ReplacedRows` of this window."""
    name = path.rsplit("/", 1)[-1]
    return is_table_only(path) and name.startswith(f"{dataset}-{window.from_ms}-{window.to_ms}{REPLACED_INFIX}")
