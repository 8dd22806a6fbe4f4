"""Rows a move left out of every Delta table, and the table-only files that carry them into the table
at the export's current place (issue 44; committed by `table.commit_window_parts`).

Two cases, both decided from the control plane alone:
- a part stranded at a place the export left: it landed there, under an attempt no commit there
  followed, so that place's table never took it (`stranded_parts`);
- a window whose operator's replace at such a place did not finish: that table holds none or part of
  it, so the window goes into the table here whole, each row once (`table_carry`, `replaced_rows`).

Both are cut again from the source by id (`attempt.Attempt`) into ``_delta_rows/…`` files, which no
file loader's glob selects and the part ledger does not hold: the rows count as delivered once, by
the parts at the old place. Split from `table` (the commit protocol) so that each stays readable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.file_format import PARQUET, format_of_key
from seqexport_dagster.contract.keys import SNAPSHOT_DATASET
from seqexport_dagster.contract.window import Window
from seqexport_dagster.delivery import delta_log
from seqexport_dagster.delivery.table import is_table_only, md5_hex
from seqexport_dagster.delivery.writer import unpack_ids
from seqexport_dagster.store import SUCCESS_MARK, ControlPlane, ExportRecord, PartRecord

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
        (p.key.rsplit("/", 1)[-1], md5_hex(p.md5)): p for place, ps in found.items() if place != here for p in ps
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
