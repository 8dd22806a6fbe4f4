"""What a window's part ledger has delivered: the ids its landed parts carry, and what is missing.

A part counts once the store confirmed it (landed); one still at ``intent`` (its PUT failed, or its
outcome is unknown) delivers nothing yet. After a destination change the parts of every location the
window was committed at count (`attempt.Attempt.deliver`, `reconcile`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from seqexport_dagster.contract.keys import SNAPSHOT_DATASET
from seqexport_dagster.contract.window import Window
from seqexport_dagster.delivery.writer import unpack_ids
from seqexport_dagster.source.reader import Row, SourceReader
from seqexport_dagster.store import SUCCESS_MARK, ExportRecord, PartRecord


def late_ids(
    source: SourceReader, export: ExportRecord, dataset: str, window: Window, ledger: list[PartRecord]
) -> set[str]:
    """Ids in the source that no *landed* part of the window carries. Empty when the window has no
    part, or when the ledger no longer holds the window's ids (legacy parts, or pruned after the
    reconciliation lookback).

    A part still at ``intent`` (its PUT failed, or its outcome is unknown) delivers nothing yet:
    its ids count as missing, so reconciliation comes back to the window, and `Attempt.deliver`
    re-sends that part under its own name (create-only) before it looks for late rows. That holds
    when no part of the window has landed too: a replace whose only part's upload timed out, then a
    move, left a window whose every row was owed, and the retry at the new place committed it empty
    (sim seed 10000163).
    """
    if not holds_ids(ledger):
        return set()
    scope = None if dataset == SNAPSHOT_DATASET else window
    return missing_ids((i for batch in source.ids(dataset, export.account_id, scope) for i in batch), ledger)


def holds_ids(ledger: list[PartRecord]) -> bool:
    """Whether the ledger can say which ids it delivered: it has parts, and none had its ids pruned."""
    recorded = [p for p in ledger if p.kind != SUCCESS_MARK]
    return bool(recorded) and all(p.ids is not None for p in recorded)


def missing_ids(ids: Iterable[str], ledger: list[PartRecord]) -> set[str]:
    """Of the source's ``ids`` of a window, those no landed part of its ``ledger`` carries (the
    ledger `holds_ids`)."""
    delivered: set[str] = set()
    for p in ledger:
        if p.kind != SUCCESS_MARK and p.landed:
            delivered.update(unpack_ids(p.ids or b""))
    return {i for i in ids if i not in delivered}


def newest_landed_attempt(ledger: Iterable[PartRecord]) -> int:
    """The newest window attempt that recorded a landed part of ``ledger`` (0: none). Whether a
    commit at that place followed it says whether a manifest (and a Delta table) lists the part
    (`Runner.unsettled`). Every kind of part counts, not only late ones: a backfill at a new place
    whose last try failed after its part 0000 landed, its failure unrecorded in a control-plane
    outage, left the window there with that part only (long run #12 seed 40000144: two late rows it
    alone carried were in no manifest and no table)."""
    return max((p.attempt for p in ledger if p.landed and p.kind != SUCCESS_MARK and p.attempt is not None), default=0)


def without_ids(batches: Iterator[list[Row]], ids: set[str]) -> Iterator[list[Row]]:
    """The batches without the rows whose id is in ``ids``."""
    try:
        for batch in batches:
            kept = [row for row in batch if row[0] not in ids]
            if kept:
                yield kept
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
