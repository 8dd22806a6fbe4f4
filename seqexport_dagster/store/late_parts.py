"""The ledger's queries for reconciliation: which committed windows to check, and what they carry.

Late rows (`seqexport_dagster.delivery.reconcile`) are found by id against the parts that *landed*, at every
location the window was ever delivered to (after a destination change the window's first parts
stay at the old place and its late rows go to the current one, `attempt.Attempt.deliver`).

Size: just over 400 lines. Every statement of reconciliation's scan stays beside the others (the same
range over open attempts, `open_attempts_in_range`, serves three of them), so that one reading shows
which index each uses (test_hot_path_indexes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.window import DAY_MS, Window
from seqexport_dagster.store.database import translate_errors
from seqexport_dagster.store.ledger import _WINDOW_BY_ID, LedgerStore
from seqexport_dagster.store.ledger import _part_params as _place_params  # the same b_ parameters as `_at_place`
from seqexport_dagster.store.prepared import Prepared, PreparedIn, change, fetch, one, scalar
from seqexport_dagster.store.records import COMMITTED, PART_INTENT, PartRecord, part_record_of
from seqexport_dagster.store.tables import WINDOW_OPEN, export_datasets, part_record_columns, parts, windows
from seqexport_dagster.store.window_days import read_window_days


class LatePartsStore(LedgerStore):
    """Mixed into `ControlPlane` with the ledger it reads."""

    @translate_errors
    def committed_since(self, export_id: str, dataset: str, *, since_ms: int, until_ms: int) -> list[Window]:
        """The distinct windows committed (anywhere) that end in ``(since_ms, until_ms]``: what
        reconciliation checks for late rows. Attempts are looked up from a day before ``since_ms``,
        since a window that ends after it may have been started that long before."""
        with self.engine.connect() as conn:
            rows = fetch(
                conn,
                _COMMITTED_SINCE,
                {"e": export_id, "d": dataset, "started": since_ms - DAY_MS, "since": since_ms, "until": until_ms},
            )
        return sorted(Window(r.from_ms, r.to_ms) for r in rows)

    def committed_windows(self, export_id: str, dataset: str, day: str) -> list[Window]:
        """The distinct windows ever committed on one day (compacted ones too): what a backfill checks."""
        found = {w.window for w in self.ledger(export_id, dataset=dataset, date=day) if w.status == COMMITTED}
        return sorted(
            found.union(*(d.windows for d in read_window_days(self.engine, export_id, dataset=dataset, date=day)))
        )

    @translate_errors
    def windows_awaiting_parts(
        self, export_id: str, dataset: str, location: str, until_ms: int, *, after_ms: int
    ) -> list[Window]:
        """Windows ending in ``(after_ms, until_ms]`` (until the position) with a part at ``location``
        that never landed: an appended late-row part whose every try failed. Reconciliation comes
        back to them. ``after_ms`` bounds the index range read (older ids are pruned anyway)."""
        with self.engine.connect() as conn:
            rows = fetch(conn, _AWAITING_PARTS, _range_params(export_id, dataset, location, after_ms, until_ms))
        return sorted(Window(r.from_ms, r.to_ms) for r in rows)

    @translate_errors
    def windows_replace_unfinished(
        self, export_id: str, dataset: str, location: str, until_ms: int, *, after_ms: int
    ) -> list[Window]:
        """Windows ending in ``(after_ms, until_ms]`` whose replace at ``location`` overwrote parts
        and ended before any commit there since (`replace_unfinished`, for every window at once).

        A replace that stopped on a control-plane outage may not have recorded its failure either,
        so no error names the window, and with every part landed nothing else brings a pass back
        to it (sim seed 10001768: its new part 0000 held the window's late rows, and the old late
        part 0001 it had not yet blanked held them too). Reads the partial index of attempts that
        are not committed (``ix_windows_open``), a small part of the ledger."""
        with self.engine.connect() as conn:
            rows = fetch(conn, _REPLACE_UNFINISHED, _range_params(export_id, dataset, location, after_ms, until_ms))
        return sorted(Window(r.from_ms, r.to_ms) for r in rows)

    @translate_errors
    def last_commit_id(self, export_id: str, dataset: str, window: Window, location: str) -> int | None:
        """The id of the window's latest attempt committed at ``location`` (None: never committed there)."""
        with self.engine.connect() as conn:
            found = scalar(conn, _LAST_COMMIT_ID, _place_params(export_id, dataset, window, location))
        return None if found is None else int(found)

    @translate_errors
    def mark_replacing(self, window_id: int) -> None:
        """This attempt overwrites the window's parts (an operator's replace), before its first PUT."""
        with self.engine.begin() as conn:
            change(conn, _UPDATE_ATTEMPT, {"b_window_id": window_id, "replacing": True})

    @translate_errors
    def pending_body(self, window_id: int, number: int) -> bytes | None:
        """The bytes part ``number`` of the attempt's window, at its place, was sent with while it
        is at intent, if they were kept (`ledger.record_part_intent`)."""
        with self.engine.connect() as conn:
            body = scalar(conn, _PENDING_BODY, {**_attempts_place(conn, window_id), "b_part": number})
        return None if body is None else bytes(body)

    @translate_errors
    def manifest_chain(self, window_id: int, through: int) -> int | None:
        """The chain start that the window's manifest ``through`` was first sent with at the
        attempt's place, by this attempt or an earlier one (None: never recorded)."""
        with self.engine.connect() as conn:
            found = scalar(conn, _MANIFEST_CHAIN, {**_attempts_place(conn, window_id), "b_through": through})
        return None if found is None else int(found)

    @translate_errors
    def record_manifest_chain(self, window_id: int, through: int, chain_from_ms: int) -> None:
        """This attempt sends the window's manifest ``through`` with this chain start (before the PUT)."""
        with self.engine.begin() as conn:
            change(
                conn,
                _UPDATE_ATTEMPT,
                {"b_window_id": window_id, "manifest_through": through, "manifest_chain_from_ms": chain_from_ms},
            )

    @translate_errors
    def clear_replacing(self, window_id: int) -> None:
        """The replace was refused before anything was overwritten: this attempt replaced nothing."""
        with self.engine.begin() as conn:
            change(conn, _UPDATE_ATTEMPT, {"b_window_id": window_id, "replacing": False})

    @translate_errors
    def replace_unfinished(self, export_id: str, dataset: str, window: Window, location: str) -> bool:
        """Whether a replace of the window at ``location`` ended after overwriting and before its
        commit (no attempt committed there since): its manifest was not written."""
        here = _place_params(export_id, dataset, window, location)
        with self.engine.connect() as conn:
            replaced = scalar(conn, _LAST_REPLACING_ID, here)
            if replaced is None:
                return False
            committed = scalar(conn, _LAST_COMMIT_ID, here)
        return committed is None or int(committed) < int(replaced)

    @translate_errors
    def places_replace_unfinished(self, export_id: str, dataset: str, window: Window) -> set[str]:
        """The places where `replace_unfinished` holds for the window, in one statement (what
        `delivery.table_moves.table_carry` asks of every place a moved window was committed at)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                _PLACES_REPLACE_UNFINISHED,
                {"e": export_id, "d": dataset, "f": window.from_ms, "t": window.to_ms},
            ).all()
        return {r.location for r in rows}

    @translate_errors
    def mark_reconciled(self, export_id: str, dataset: str, at_ms: int) -> None:
        """A scheduled reconciliation pass that started at ``at_ms`` checked every window of the
        dataset it had to: the next pass reaches back from there (`reconcile.since_for`)."""
        with self.engine.begin() as conn:
            change(conn, _MARK_RECONCILED, {"b_export_id": export_id, "b_dataset": dataset, "reconciled_at": at_ms})

    @translate_errors
    def parts_of_windows(
        self, export_id: str, dataset: str, wanted: Sequence[Window], *, here: str
    ) -> dict[Window, dict[str, list[PartRecord]]]:
        """`parts_everywhere` of several windows of one dataset, in two statements instead of two
        per window (what a reconciliation pass reads for the windows it checks)."""
        starts = sorted({w.from_ms for w in wanted})
        found: dict[Window, dict[str, list[PartRecord]]] = {w: {} for w in wanted}
        if not starts:
            return found
        with self.engine.connect() as conn:
            committed = fetch(conn, *_COMMITTED_PLACES.bind(starts, {"e": export_id, "d": dataset}))
            rows = fetch(conn, *_PARTS_OF_WINDOWS.bind(starts, {"e": export_id, "d": dataset}))
        places: dict[Window, set[str]] = {}
        for r in committed:
            places.setdefault(Window(r.from_ms, r.to_ms), set()).add(r.location)
        for r in rows:
            window = Window(r.from_ms, r.to_ms)
            by_place = found.get(window)
            if by_place is not None and (r.location == here or r.location in places.get(window, ())):
                by_place.setdefault(r.location, []).append(part_record_of(r))
        return found

    @translate_errors
    def last_commits_of_windows(
        self, export_id: str, dataset: str, wanted: Sequence[Window], *, here: str
    ) -> dict[Window, int]:
        """`last_commit_id` at ``here`` of several windows in one statement (a window never
        committed there is absent): what a reconciliation pass compares each window's newest
        landed part with (`reconcile.unsettled`), instead of a statement per window (issue 29)."""
        starts = sorted({w.from_ms for w in wanted})
        if not starts:
            return {}
        with self.engine.connect() as conn:
            rows = fetch(conn, *_LAST_COMMITS_OF_WINDOWS.bind(starts, {"e": export_id, "d": dataset, "here": here}))
        return {Window(r.from_ms, r.to_ms): int(r.last) for r in rows}

    @translate_errors
    def parts_everywhere(
        self, export_id: str, dataset: str, window: Window, *, here: str | None = None
    ) -> dict[str, list[PartRecord]]:
        """The part ledger of one window at every location it was committed at, by location, and
        at ``here`` whether committed there or not (one query for what reconciliation reads)."""
        with self.engine.connect() as conn:
            rows = fetch(
                conn,
                _PARTS_EVERYWHERE,
                {"e": export_id, "d": dataset, "f": window.from_ms, "t": window.to_ms, "here": here or ""},
            )
        found: dict[str, list[PartRecord]] = {}
        for r in rows:
            found.setdefault(r.location, []).append(part_record_of(r))
        return found


def _at_place(table: sa.Table) -> sa.ColumnElement[bool]:
    """Rows of ``table`` (`windows` or `parts`) of one window at one place (`_place_params`)."""
    return sa.and_(
        table.c.export_id == sa.bindparam("b_export_id"),
        table.c.dataset == sa.bindparam("b_dataset"),
        table.c.from_ms == sa.bindparam("b_from_ms"),
        table.c.to_ms == sa.bindparam("b_to_ms"),
        table.c.location == sa.bindparam("b_location"),
    )


def _attempts_place(conn: sa.Connection, window_id: int) -> dict[str, Any]:
    """The parameters of `_at_place` for the window of attempt ``window_id``, at the place it wrote to."""
    w = one(conn, _WINDOW_BY_ID, {"b_window_id": window_id})
    return _place_params(w.export_id, w.dataset, Window(w.from_ms, w.to_ms), w.location)


# The statements of the calls above that every window and part makes, built once with bind
# parameters: building a statement and its cache key costs more Python than SQLite takes to run it
# (the simulator's profile). ``b_`` parameters fill the WHERE clause; the other keys of an UPDATE's
# parameters name the columns it sets.
_LAST_COMMIT_ID: Final = Prepared(
    sa.select(sa.func.max(windows.c.id)).where(_at_place(windows), windows.c.status == COMMITTED)
)
_LAST_REPLACING_ID: Final = Prepared(
    sa.select(sa.func.max(windows.c.id)).where(_at_place(windows), windows.c.replacing.is_(True))
)
#: Sets the columns its parameters name on attempt ``b_window_id``.
_UPDATE_ATTEMPT: Final = Prepared(windows.update().where(windows.c.id == sa.bindparam("b_window_id")))
_PENDING_BODY: Final = Prepared(
    sa.select(parts.c.pending_body).where(_at_place(parts), parts.c.part == sa.bindparam("b_part"))
)
_MANIFEST_CHAIN: Final = Prepared(
    sa.select(windows.c.manifest_chain_from_ms)
    .where(
        _at_place(windows),
        windows.c.manifest_through == sa.bindparam("b_through"),
        windows.c.manifest_chain_from_ms.is_not(None),
    )
    .order_by(windows.c.id.desc())
    .limit(1)
)
_MARK_RECONCILED: Final = Prepared(
    export_datasets.update().where(
        export_datasets.c.export_id == sa.bindparam("b_export_id"),
        export_datasets.c.dataset == sa.bindparam("b_dataset"),
        export_datasets.c.removed_at.is_(None),
    )
)


def _parts_everywhere() -> sa.Select[Any]:
    """Built once (reconciliation runs it for every window it checks): the parts of one window at
    the places it was committed at (an uncorrelated index range read of the windows) or at ``here``."""
    committed = sa.select(windows.c.location).where(
        windows.c.export_id == sa.bindparam("e"),
        windows.c.dataset == sa.bindparam("d"),
        windows.c.from_ms == sa.bindparam("f"),
        windows.c.to_ms == sa.bindparam("t"),
        windows.c.status == COMMITTED,
    )
    return (
        sa.select(*part_record_columns)
        .where(
            parts.c.export_id == sa.bindparam("e"),
            parts.c.dataset == sa.bindparam("d"),
            parts.c.from_ms == sa.bindparam("f"),
            parts.c.to_ms == sa.bindparam("t"),
            sa.or_(parts.c.location.in_(committed), parts.c.location == sa.bindparam("here")),
        )
        .order_by(parts.c.location, parts.c.part)
    )


_PARTS_EVERYWHERE: Final = Prepared(_parts_everywhere())

# Reconciliation's per-dataset reads, built once with bind parameters: building a statement (and
# its cache key) anew on every pass cost more than running it (issue 29).
_COMMITTED_SINCE: Final = Prepared(
    sa.select(windows.c.from_ms, windows.c.to_ms)
    .where(
        windows.c.export_id == sa.bindparam("e"),
        windows.c.started_at >= sa.bindparam("started"),  # `ledger`'s index range
        windows.c.dataset == sa.bindparam("d"),
        windows.c.status == COMMITTED,
        windows.c.to_ms > sa.bindparam("since"),
        windows.c.to_ms <= sa.bindparam("until"),
    )
    .distinct()
)
_AWAITING_PARTS: Final = Prepared(
    sa.select(parts.c.from_ms, parts.c.to_ms)
    .where(
        parts.c.export_id == sa.bindparam("e"),
        parts.c.dataset == sa.bindparam("d"),
        parts.c.location == sa.bindparam("here"),
        parts.c.status == PART_INTENT,
        parts.c.from_ms > sa.bindparam("from_after"),  # windows are at most a day long
        parts.c.to_ms > sa.bindparam("after"),
        parts.c.to_ms <= sa.bindparam("until"),
    )
    .distinct()
)


def _range_params(export_id: str, dataset: str, location: str, after_ms: int, until_ms: int) -> dict[str, Any]:
    """Of `_AWAITING_PARTS` and `open_attempts_in_range`: windows ending in ``(after_ms, until_ms]``
    at ``location``; they start at most a day before they end."""
    return {
        "e": export_id,
        "d": dataset,
        "here": location,
        "after": after_ms,
        "until": until_ms,
        "from_after": after_ms - DAY_MS,
    }


def _committed_since() -> sa.Exists:
    """A commit of the same window at the same place after this attempt (`windows` as ``w``): a
    later ``replacing`` or plain attempt that committed finished what this one left open."""
    w = windows
    later = windows.alias("later")
    return sa.exists().where(
        later.c.export_id == w.c.export_id,
        later.c.dataset == w.c.dataset,
        later.c.from_ms == w.c.from_ms,
        later.c.to_ms == w.c.to_ms,
        later.c.location == w.c.location,
        later.c.status == COMMITTED,
        later.c.id > w.c.id,
    )


def open_attempts_in_range(*where: Any) -> sa.Select[Any]:
    """Windows ending in ``(after, until]`` (`_range_params`) of attempts not committed that no
    commit at their own place followed since, and that meet ``where``: read from the partial index
    of attempts not committed (``ix_windows_open``), a small part of the ledger."""
    w = windows
    committed_since = _committed_since()
    return (
        sa.select(w.c.from_ms, w.c.to_ms)
        .where(
            w.c.export_id == sa.bindparam("e"),
            w.c.dataset == sa.bindparam("d"),
            WINDOW_OPEN,
            w.c.from_ms > sa.bindparam("from_after"),  # windows are at most a day long
            w.c.to_ms > sa.bindparam("after"),
            w.c.to_ms <= sa.bindparam("until"),
            *where,
            ~committed_since,
        )
        .distinct()
    )


def _places_replace_unfinished() -> sa.Select[Any]:
    """An attempt of the window that is not committed and overwrote as a replace, with no commit
    at its place since (the later ``replacing`` attempt committed is a finished replace)."""
    w = windows
    committed_since = _committed_since()
    return (
        sa.select(w.c.location)
        .where(
            w.c.export_id == sa.bindparam("e"),
            w.c.dataset == sa.bindparam("d"),
            w.c.from_ms == sa.bindparam("f"),
            w.c.to_ms == sa.bindparam("t"),
            w.c.replacing.is_(True),
            w.c.status != COMMITTED,
            ~committed_since,
        )
        .distinct()
    )


_PLACES_REPLACE_UNFINISHED: Final = _places_replace_unfinished()
_REPLACE_UNFINISHED: Final = Prepared(
    open_attempts_in_range(windows.c.location == sa.bindparam("here"), windows.c.replacing.is_(True))
)
# The windows' starts are an IN list, prepared for each number of windows (`PreparedIn`).
_COMMITTED_PLACES: Final = PreparedIn(
    "start",
    lambda starts: (
        sa.select(windows.c.from_ms, windows.c.to_ms, windows.c.location)
        .where(
            windows.c.export_id == sa.bindparam("e"),
            windows.c.dataset == sa.bindparam("d"),
            windows.c.from_ms.in_(starts),
            windows.c.status == COMMITTED,
        )
        .distinct()
    ),
)
_LAST_COMMITS_OF_WINDOWS: Final = PreparedIn(
    "start",
    lambda starts: (
        sa.select(windows.c.from_ms, windows.c.to_ms, sa.func.max(windows.c.id).label("last"))
        .where(
            windows.c.export_id == sa.bindparam("e"),
            windows.c.dataset == sa.bindparam("d"),
            windows.c.from_ms.in_(starts),
            windows.c.location == sa.bindparam("here"),
            windows.c.status == COMMITTED,
        )
        .group_by(windows.c.from_ms, windows.c.to_ms)
    ),
)
_PARTS_OF_WINDOWS: Final = PreparedIn(
    "start",
    lambda starts: (
        sa.select(*part_record_columns)
        .where(
            parts.c.export_id == sa.bindparam("e"),
            parts.c.dataset == sa.bindparam("d"),
            parts.c.from_ms.in_(starts),
        )
        .order_by(parts.c.location, parts.c.part)
    ),
)
