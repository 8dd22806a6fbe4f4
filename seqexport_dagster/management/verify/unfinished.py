"""Windows (event windows and snapshot days) an attempt left in the bucket that nothing will ever
finish: `verify --ledger`'s reading of them.

An attempt sends its parts before it commits its window. If it stops before the commit, the
scheduler retries the window later, but only while the window is the position of a dataset
still on a live export. Two things take it off that list for good:
- the export is deleted (a run stops before its next file);
- the dataset is removed while the window waits for its retry. Added again, it starts anew from
  the re-add.

The parts that landed stay in the bucket ("files stay"), and no window is ever committed for them.
The part ledger still records each one, so `verify --ledger` does not call such a window
`not_in_ledger` (a window the ledger never heard of), as long as the bucket holds exactly the rows
of the window's recorded parts up to one of them. Parts are sent in order, so only the last ones
can be of unknown outcome, and every part marked landed must be there. Sim seed 8011: the only
part's answer came past the deadline, and `sms_events` was removed before the retry.

The same holds for a committed window whose late-row part an attempt left that way
(`late_parts_left`): the bucket holds the rows of the commit and of that part.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import TYPE_CHECKING

from seqexport_dagster.contract.keys import SNAPSHOT_DATASET
from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.contract.window import Window

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane

Slot = tuple[str, Window]


def abandoned_windows(store: ControlPlane, export_id: str, source: str, found: Mapping[Slot, int]) -> set[Slot]:
    """The windows of ``found`` (rows in the bucket at ``source``, none committed) that an attempt
    left here for good, with the rows its part ledger recorded."""
    from seqexport_dagster.store import DELETED, is_control_plane

    # Every dataset: a snapshot day's attempt leaves its parts the same way (sim seed 10001585: the
    # day's `_SUCCESS` landed past the deadline, the retry met a revoked key, then the export was deleted).
    candidates = set(found)
    if not candidates or not is_control_plane(store):
        return set()  # the HTTP API's ledger (remote CLI) carries no parts
    export = store.get_export(export_id)
    # A live dataset's window at its position is retried (`store.fleet.unfinished_attempts`):
    # still being written, so still reported.
    retried = set() if export.status == DELETED else {(d.dataset, d.position_ms) for d in export.datasets}
    # A live dataset's past snapshot day may be owed to its retry too (`planner.owed_snapshot_day`):
    # a snapshot day is left for good only once the export is deleted or the dataset removed.
    live = set() if export.status == DELETED else {d.dataset for d in export.datasets}
    candidates = {
        slot
        for slot in candidates
        if (slot[0], slot[1].from_ms) not in retried and not (slot[0] == SNAPSHOT_DATASET and slot[0] in live)
    }
    return _as_recorded(store, export_id, source, export.endpoint, candidates, found)


def late_parts_left(store: ControlPlane, export_id: str, source: str, found: Mapping[Slot, int]) -> set[Slot]:
    """The committed windows of ``found`` (rows in the bucket at ``source``, other than their last
    commit there) whose late parts an attempt left here that nothing will commit: the export was
    deleted, or the dataset removed, after the part was sent (sim seeds 10000494, 10000533: a
    worker died after a late part landed, then the export was deleted). On a live dataset
    reconciliation commits them (`reconcile.unsettled`), so they are still reported until then,
    unless every part of the window here was sent before the dataset's re-add: removed after
    them, it starts anew from the re-add (long run #12 seed 48000010: a worker died after a
    late part landed, then `email_events` was removed, and added again the next day)."""
    from seqexport_dagster.store import DELETED, is_control_plane

    candidates = {slot for slot in found if slot[0] in EVENT_DATASETS}
    if not candidates or not is_control_plane(store):
        return set()
    export = store.get_export(export_id)
    added = {} if export.status == DELETED else {d.dataset: d.added_at for d in export.datasets}
    candidates = {slot for slot in candidates if slot[0] not in added or slot[1].to_ms <= added[slot[0]]}
    return _as_recorded(store, export_id, source, export.endpoint, candidates, found, sent_before=added)


def _as_recorded(
    store: ControlPlane,
    export_id: str,
    source: str,
    endpoint: str | None,
    candidates: set[Slot],
    found: Mapping[Slot, int],
    *,
    sent_before: Mapping[str, int] | None = None,
) -> set[Slot]:
    """The windows of ``candidates`` whose rows in the bucket are those of the parts the part
    ledger recorded for them at ``source`` (`_possible_rows`); with ``sent_before`` (dataset ->
    time), of a dataset it names only if every such part was sent before that time."""
    import sqlalchemy as sa

    from seqexport_dagster.management.verify.ledger_scope import source_locations
    from seqexport_dagster.store import PART_LANDED, SUCCESS_MARK
    from seqexport_dagster.store.tables import parts

    if not candidates:
        return set()
    places = source_locations(source, {endpoint})
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(parts.c.dataset, parts.c.from_ms, parts.c.to_ms, parts.c.rows, parts.c.status, parts.c.written_at)
            .where(
                parts.c.export_id == export_id,
                parts.c.location.in_(sorted(places)),
                parts.c.dataset.in_(sorted({d for d, _ in candidates})),
                parts.c.kind != SUCCESS_MARK,
            )
            .order_by(parts.c.part)
        ).all()
    recorded: dict[Slot, list[tuple[int, bool]]] = {}
    since = sent_before or {}
    touched: set[Slot] = set()
    for r in rows:
        slot = (r.dataset, Window(r.from_ms, r.to_ms))
        recorded.setdefault(slot, []).append((r.rows, r.status == PART_LANDED))
        if r.dataset in since and r.written_at >= since[r.dataset]:
            touched.add(slot)
    return {slot for slot in candidates - touched if found[slot] in _possible_rows(recorded.get(slot, []))}


def _possible_rows(recorded: list[tuple[int, bool]]) -> set[int]:
    """Rows the bucket may hold of a window whose parts the ledger recorded (rows, landed), in order:
    every landed part and at least part 0000 (the window is in the bucket), then none, some or all
    of the parts after those."""
    totals = [0, *accumulate(rows for rows, _ in recorded)]
    last_landed = max((i + 1 for i, (_, landed) in enumerate(recorded) if landed), default=0)
    return set(totals[max(last_landed, 1) :])
