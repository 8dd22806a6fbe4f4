"""Part-ledger delivery: how one attempt brings a window's parts in the bucket up to the source.

The runner (`seqexport_dagster.delivery.runner`) decides which window or snapshot to write, and when, and
commits it; an `Attempt` here writes its parts, write-once, in the window's format, as steps 2 to 4
of the runner's order of operations say: each part's intent in the ledger before its PUT, a retry
finishing what an earlier attempt left (a part of unknown outcome re-sent under the same name,
create-only), and late rows, found by id against the ledger (`late_ids`), as additional parts. Only
an operator's replace overwrites (`Attempt.overwrite`).

What can go wrong: the export is paused or deleted before a file (`RunInterrupted`), its destination
changes (`DestinationChanged`: the runner starts over at the new place), or the store refuses a write
(an `ExportError`). A definite refusal forgets the part's intent, so the next attempt may cut that part
afresh; a transport failure keeps it (outcome unknown).


Size: over 400 lines on purpose. One attempt's write-once protocol (resume, re-sends of unknown
outcome, late parts, an operator's replace and the restore of a refused one) reads and writes the
same part-ledger records; split, the rules that keep a part from counting twice would be read apart.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, PARQUET, FileFormat
from seqexport_dagster.contract.keys import SNAPSHOT_DATASET, connection_test_key
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import Window
from seqexport_dagster.delivery.delivered import late_ids, newest_landed_attempt, without_ids
from seqexport_dagster.delivery.part_writers import Writer, empty_body, part_writer
from seqexport_dagster.delivery.writer import Part, SortKey, pack_ids, unpack_ids
from seqexport_dagster.destination import Destination, DestinationConfig, OperatorPolicy, PutOutcome, content_md5
from seqexport_dagster.errors import (
    AccessDenied,
    DestinationChanged,
    EndpointTooSlow,
    PermanentError,
    ResponseTooLarge,
    RunInterrupted,
    UntypeableValue,
)
from seqexport_dagster.source.reader import Row, SourceReader
from seqexport_dagster.store import (
    ACTIVE,
    LATE_PART,
    LEGACY_PART,
    RANGE_PART,
    SUCCESS_MARK,
    ControlPlane,
    ExportRecord,
    PartRecord,
    location_of,
)

#: The snapshot's _SUCCESS in the part ledger: a number no part can have.
SUCCESS_NUMBER: Final = -1
EMPTY_MD5: Final = content_md5(b"")
_PROBE: Final = b"Sequenzy Data Exports write probe: checks that this key may still create objects. Safe to delete.\n"

DestinationFactory = Callable[[DestinationConfig, OperatorPolicy], Destination]


@dataclass(frozen=True, slots=True)
class Sent:
    """What one attempt uploaded, beside the window's totals (a resumed attempt sends less)."""

    parts: int = 0
    rows: int = 0
    bytes: int = 0
    skipped: int = 0  # landed parts of earlier attempts, left as they are
    resent: int = 0  # parts of unknown outcome sent again
    existed: int = 0  # of those, the store said (412, or a probed 403) an earlier send had landed
    late_rows: int = 0  # rows appended as additional parts because they appeared late


@dataclass(slots=True)
class Tally:
    rows: int = 0
    parts: int = 0
    bytes: int = 0
    sent_parts: int = 0
    sent_rows: int = 0
    sent_bytes: int = 0
    skipped: int = 0
    resent: int = 0
    existed: int = 0
    late_rows: int = 0
    next_number: int = 0
    #: The newest attempt that recorded a part landed here before this one (`delivered.newest_landed_attempt`).
    newest_landed: int = 0

    def landed(self, rows: int, size: int) -> None:
        self.rows, self.parts, self.bytes = self.rows + rows, self.parts + 1, self.bytes + size

    def uploaded(self, part: Part) -> None:
        self.sent_parts, self.sent_rows, self.sent_bytes = (
            self.sent_parts + 1,
            self.sent_rows + part.rows,
            self.sent_bytes + part.size,
        )

    def sent(self) -> Sent:
        return Sent(
            self.sent_parts,
            self.sent_rows,
            self.sent_bytes,
            self.skipped,
            self.resent,
            self.existed,
            self.late_rows,
        )


class Attempt:
    """One attempt at one window or snapshot, at one destination version."""

    def __init__(
        self,
        store: ControlPlane,
        source: SourceReader,
        export: ExportRecord,
        *,
        policy: OperatorPolicy,
        open_destination: DestinationFactory,
        clock: Callable[[], int],
        part_limit: int,
        before_file: Callable[[str], None] | None,
        may_overwrite: set[str] | None = None,
    ) -> None:
        self.store = store
        self.source = source
        self.export = export
        self.clock = clock
        self.part_limit = part_limit
        self.before_file = before_file
        self.config, self.version = store.destination_config(export.id)
        self.location = location_of(self.config.provider, self.config.endpoint, self.config.bucket, self.config.prefix)
        if self.location != export.location:  # moved between reading the export and its secret
            raise DestinationChanged
        self.destination: Destination = open_destination(self.config, policy)
        self.may_overwrite = may_overwrite if may_overwrite is not None else set()

    def guard(self) -> None:
        if self.before_file is not None:  # issue 14: renews the writer lease
            self.before_file(self.export.id)
        state = self.store.state(self.export.id)
        if state.status != ACTIVE:
            raise RunInterrupted(self.export.id, state.status)
        if state.destination_version != self.version:
            raise DestinationChanged

    def create(self, key: str, body: bytes, *, outcome_unknown: bool = False) -> PutOutcome:
        """Create ``key`` (never replace it). ``outcome_unknown``: an earlier send may have landed it.

        Without a precondition a key that may not overwrite answers 403 to a re-send of an object
        that is there. That 403 is believed to mean "revoked" only if a fresh probe write under
        ``<prefix>/_sequenzy/`` fails too; otherwise the object had landed.
        """
        self.guard()
        try:
            return self.destination.put(key, body, create_only=True)
        except AccessDenied as exc:
            if not (outcome_unknown or exc.outcome_unknown):
                raise
            try:
                self.destination.put(connection_test_key(self.config.prefix, f"probe-{secrets.token_hex(8)}"), _PROBE)
            except AccessDenied:
                raise exc from None  # the key may not create anything: truly denied
            return PutOutcome.EXISTED

    def write_manifest(self, key: str, body: bytes, replace: bool) -> PutOutcome:
        """A window's manifest (`manifest.write_manifest`): written like a part of unknown outcome."""
        if replace:
            self.overwrite(key, body)
            return PutOutcome.CREATED
        return self.create(key, body, outcome_unknown=True)

    def rewrite_unfinished(self, key: str, body: bytes, replace: bool) -> PutOutcome:
        """A part or the manifest of a window whose replace ended before its commit (sim seed 1):
        the object under that name may be the old one, so it is overwritten as the replace would
        have. A key that may not overwrite had its part overwrites refused (their records put back:
        the manifest is then the old one's bytes); it is created like a part of unknown outcome."""
        try:
            self.overwrite(key, body)
        except AccessDenied:
            return self.create(key, body, outcome_unknown=True)
        return PutOutcome.CREATED

    def overwrite(self, key: str, body: bytes, *, guarded: bool = False) -> None:
        """An operator's replace: the one write that may overwrite (``guarded``: just checked)."""
        if not guarded:
            self.guard()
        try:
            self.destination.put(key, body, create_only=False)
        except AccessDenied as exc:
            raise _may_not_overwrite(exc) from None

    def check_may_overwrite(self) -> None:
        """Refuse a replace up front when the key may only create (sim seed 10000000).

        A replace whose first write creates a new object (the window's first parts are at an earlier
        location; only its late parts are here) would otherwise land that part, then be refused at
        the first part that exists: the new part and the old late part then hold the same rows at
        this location. A fresh probe object under ``<prefix>/_sequenzy/`` is created, then
        overwritten; a key that may only create is refused there, before any part is written.
        A place that passed is not probed again by the same runner (``may_overwrite``): a replace
        of a day of 15-minute windows leaves one probe object, not 96.
        """
        place = f"{self.location}@{self.version}"
        if place in self.may_overwrite:
            return
        key = connection_test_key(self.config.prefix, f"overwrite-probe-{secrets.token_hex(8)}")
        self.guard()
        try:
            self.destination.put(key, _PROBE, create_only=True)
        except AccessDenied as exc:
            if not exc.outcome_unknown:
                raise
            # A re-send answered 403 without a precondition: the first send had created the probe.
        try:
            self.destination.put(key, _PROBE, create_only=False)
        except AccessDenied as exc:
            raise _may_not_overwrite(exc) from None
        self.may_overwrite.add(place)

    def close(self) -> None:
        self.destination.close()

    def deliver(
        self,
        window_id: int,
        dataset: str,
        window: Window,
        keys: Callable[[int], str],
        *,
        replace: bool,
        committed: bool,
        elsewhere: Sequence[PartRecord] = (),
        fmt: FileFormat = DEFAULT_FORMAT,
        finish_replace: bool = False,
        redeliver: bool = False,
    ) -> Tally:
        """Bring the window's parts at the attempt's location up to the source, write-once.

        1. parts of unknown outcome are sent again with the rows they were recorded with;
        2. an uncommitted window continues after the last landed boundary;
        3. a window that was resumed or committed gets its late rows as additional parts.

        ``elsewhere``: the window's parts at the other locations it was committed at (a destination
        change since). Their rows count as delivered. A window with no part of its own here (it was
        delivered whole before the move) gets only its late rows here, numbered on after every part
        it has anywhere, so its parts at both places together are numbered without a clash.
        ``finish_replace``: a replace here ended before its commit; its parts of unknown outcome
        are the replace's new cut and are sent as it would have (`rewrite_unfinished`).
        ``redeliver`` (an operator's `seqexport backfill --redeliver`, after a bucket lost files): a
        landed part is sent again like a part of unknown outcome, with its recorded rows under its
        name, create-only. Only PutObject is used, so the bucket is never asked what it holds: a
        name still there answers 412 (or a probed 403) and is left as it is; a lost one is written.
        """
        account = self.export.account_id
        snapshot = dataset == SNAPSHOT_DATASET
        ledger = [
            p for p in self.store.window_parts(self.export.id, dataset, window, self.location) if p.kind != SUCCESS_MARK
        ]
        if ledger and not (replace or committed or finish_replace):
            # A replace here that stopped before the window was ever committed here (at a new place
            # that held only its late parts): its part 0000 at intent carries the late parts' rows
            # too, and re-sent create-only beside them it delivered those rows twice (sim seed
            # 56000391). It is finished as a replace, as one where the window was committed is
            # (`Runner.write_window`). Asked only of a resumed window: a new one has no ledger here.
            finish_replace = self.store.replace_unfinished(self.export.id, dataset, window, self.location)
        if replace or any(p.kind == LEGACY_PART for p in ledger) or (finish_replace and _carried_twice(ledger)):
            # An operator's replace, or a window the runner before the part ledger left unfinished
            # (no boundaries to resume from): rewrite from part 0000. Needs overwrite rights. Also a
            # replace that ended part-way (sim seed 10000118): its new cut stands beside parts it had
            # not reached yet (an old late part, a part it would have blanked) that carry some of the
            # same rows; finishing only its parts of unknown outcome would keep both. It is run again.
            return self._replace(window_id, dataset, window, keys, ledger, fmt)
        tally = Tally(newest_landed=newest_landed_attempt(ledger))
        writer = part_writer(fmt, DATASETS[dataset], self.part_limit)
        # A snapshot part could not be cut again as sent (its rows change), so its bytes are kept
        # with its intent until it lands and every re-send is those bytes (`_resend`). Without a
        # precondition a re-send of other bytes would replace a part that landed; with one, a new
        # cut that a send creates and whose answer is lost leaves the ledger unable to tell which
        # body a later 412 kept (sim seed 10001628: the ledger had the first cut's 110 rows, the
        # bucket a later cut's 108).
        keep = snapshot
        boundary: SortKey | None = None
        for p in ledger:
            tally.next_number = p.number + 1
            if p.landed and not redeliver:
                tally.skipped += 1
                tally.landed(p.rows, p.size)
            else:
                lo, hi = (boundary, p.last) if p.kind == RANGE_PART else (None, None)
                rows = self._rows(dataset, account, window, lo, hi, wanted=set(unpack_ids(p.ids or b"")))
                part = _one_part(writer, rows, p.number)
                if finish_replace:
                    body = self._as_recorded(window_id, p, part) or part.body
                    outcome, held = self.rewrite_unfinished(p.key, body, True), (p.rows, p.size)
                else:
                    outcome, held = self._resend(window_id, dataset, window, p, part)
                tally.resent += 1
                tally.existed += outcome == PutOutcome.EXISTED
                self.store.mark_part_landed(window_id, p.number, self.clock())
                tally.landed(*held)
                if outcome == PutOutcome.CREATED:
                    tally.uploaded(part)
            if p.kind == RANGE_PART and p.last is not None:
                boundary = p.last
        if redeliver and snapshot and committed:
            # A whole snapshot day goes out as it was recorded: a subscriber added since belongs to
            # a later day, and nothing may follow the day's `_SUCCESS`.
            return tally
        own = any(p.kind in (RANGE_PART, LEGACY_PART) for p in ledger)
        if elsewhere and not own:  # delivered whole at an earlier location: late rows only, here
            committed = True
            tally.next_number = max([tally.next_number, *(p.number + 1 for p in elsewhere if p.kind != SUCCESS_MARK)])
        if not committed:
            # Late-row parts already here (a moved window's): their rows are never cut twice. Every
            # part of ``ledger`` has landed by now, those re-sent above too (sim seed 10002190: a
            # late part of unknown outcome, re-sent by a backfill at the new place, was left out of
            # this set). Range parts here do not make them redundant: a replace at the new place
            # that stopped after recording its part 0000 left one (sim seed 56000391), and rows
            # after 0000's boundary held the late part's rows too.
            late_here = {i for p in ledger if p.kind == LATE_PART for i in unpack_ids(p.ids or b"")}
            if snapshot:
                batches = self.source.snapshot_batches(account, after=boundary)
            elif fmt == PARQUET and not late_here:
                # Arrow batches where the source reads them natively (PostgreSQL): the same bytes as
                # from rows (test_arrow_parquet.py), at a fraction of the CPU (docs/performance.md).
                batches = self.source.window_record_batches(dataset, account, window, after=boundary)
            else:
                batches = self.source.window_batches(dataset, account, window, after=boundary)
            if late_here:
                batches = without_ids(batches, late_here)
            self._send(window_id, writer, batches, keys, tally, kind=RANGE_PART, empty=not ledger, keep=keep)
        if ledger or committed:
            late = late_ids(
                self.source,
                self.export,
                dataset,
                window,
                [*self.store.window_parts(self.export.id, dataset, window, self.location), *elsewhere],
            )
            if late:
                rows = self._rows(dataset, account, window, None, None, wanted=late)
                before = tally.rows
                self._send(window_id, writer, rows, keys, tally, kind=LATE_PART, empty=False, keep=keep)
                tally.late_rows = tally.rows - before
        return tally

    def recut(self, dataset: str, window: Window, p: PartRecord) -> Part | None:
        """Part ``p`` (landed at an earlier place) cut again from the source by its recorded ids, as
        Parquet: the bytes that landed there, or None when the source no longer gives them (a row
        erased since). Event rows do not change, so a re-cut is the same bytes (`_resend` relies
        on it too), and a re-send of it under one name is always the same object."""
        if p.ids is None or p.md5 is None:
            return None
        writer = part_writer(PARQUET, DATASETS[dataset], self.part_limit)
        rows = self._rows(dataset, self.export.account_id, window, None, None, wanted=set(unpack_ids(p.ids)))
        try:
            parts = list(writer.parts(rows, first=p.number, empty=False))
        finally:
            _close(rows)
        if len(parts) != 1 or parts[0].content_md5 != p.md5:
            return None
        return parts[0]

    def cut_rows(self, dataset: str, window: Window, ids: frozenset[str]) -> Iterator[Part] | None:
        """The window's rows with these ids, as Parquet parts numbered from 0000 (`table.ReplacedRows`),
        or None when the source no longer holds every one of them (a row erased since): the same
        ids then always give the same bytes (event rows do not change). Parts are cut as they are
        read, so a whole window is never held at once."""
        present: set[str] = set()
        batches = self.source.ids(dataset, self.export.account_id, window)
        try:
            for batch in batches:
                present.update(i for i in batch if i in ids)
        finally:
            _close(batches)
        if len(present) != len(ids):
            return None
        writer = part_writer(PARQUET, DATASETS[dataset], self.part_limit)
        rows = self._rows(dataset, self.export.account_id, window, None, None, wanted=set(ids))
        return _closing(writer.parts(rows, first=0, empty=False), rows)

    def mark_success(self, window_id: int, key: str, *, replace: bool) -> None:
        """The snapshot's ``_SUCCESS``, strictly after every part, recorded before its PUT like a part."""
        self.store.record_part_intent(
            window_id,
            number=SUCCESS_NUMBER,
            key=key,
            kind=SUCCESS_MARK,
            last=None,
            rows=0,
            size=0,
            md5=EMPTY_MD5,
            ids=pack_ids(()),
            now_ms=self.clock(),
        )
        if replace:
            self.overwrite(key, b"")
        else:
            self.create(key, b"", outcome_unknown=True)
        self.store.mark_part_landed(window_id, SUCCESS_NUMBER, self.clock())

    def _rows(
        self,
        dataset: str,
        account: str,
        window: Window,
        after: SortKey | None,
        until: SortKey | None,
        *,
        wanted: set[str],
    ) -> Iterator[list[Row]]:
        """Rows of a range (or the whole window) whose id is in ``wanted``, in the parts' order."""
        if not wanted:  # an empty part: nothing to read
            return
        if dataset == SNAPSHOT_DATASET:
            batches = self.source.snapshot_batches(account, after=after, until=until)
        else:
            batches = self.source.window_batches(dataset, account, window, after=after, until=until)
        try:
            for batch in batches:
                kept = [row for row in batch if row[0] in wanted]
                if kept:
                    yield kept
        finally:
            _close(batches)

    def _send(
        self,
        window_id: int,
        writer: Writer,
        batches: Iterator[list[Row]],
        keys: Callable[[int], str],
        tally: Tally,
        *,
        kind: str,
        empty: bool,
        keep: bool = False,
    ) -> None:
        part: Part
        try:
            for part in writer.parts(batches, first=tally.next_number, empty=empty):
                key = keys(part.number)
                self._record_intent(window_id, key, part, kind, keep=keep)
                try:
                    outcome = self.create(key, part.body)
                except PermanentError as exc:
                    # A definite refusal (403, 404, a bad signature...) created nothing: the next
                    # attempt may cut this part afresh. Transport failures keep the intent (unknown),
                    # and so does an answer that came too late or too large: the PUT may have landed
                    # (sim seed 4: forgotten, the part was cut again under its landed name).
                    if not _outcome_unknown(exc):
                        self.store.forget_part_intent(window_id, part.number)
                    raise
                self.store.mark_part_landed(window_id, part.number, self.clock())
                tally.next_number = part.number + 1
                tally.landed(part.rows, part.size)
                if outcome == PutOutcome.CREATED:
                    tally.uploaded(part)
                else:
                    tally.existed += 1
                # Landed and counted: its body and ids go now, not while the next part is cut (the
                # loop variable would hold them until then: ~5 MB on 50,000 email events, measured).
                del part
        finally:
            # Release the source connection (on PostgreSQL an open transaction with a server-side
            # cursor) now, not whenever the failure's traceback is collected.
            _close(batches)

    def _replace(
        self,
        window_id: int,
        dataset: str,
        window: Window,
        keys: Callable[[int], str],
        ledger: list[PartRecord],
        fmt: FileFormat,
    ) -> Tally:
        account = self.export.account_id
        # Before anything of the replace is recorded: its first intent replaces a part's record,
        # and a key that may only create could never finish what that record then says (sim seed
        # 10001195: the intent's answer was lost, the redo was refused on every pass, and the
        # window blocked its dataset's reconciliation). Also, something here may be overwritten
        # only after part 0000 is created (sim seed 10000000).
        self.check_may_overwrite()
        self.store.mark_replacing(window_id)  # before the first overwrite: see `runner.write_window`
        if dataset == SNAPSHOT_DATASET:
            batches = self.source.snapshot_batches(account)
        else:
            batches = self.source.window_batches(dataset, account, window)
        tally = Tally(newest_landed=newest_landed_attempt(ledger))
        writer = part_writer(fmt, DATASETS[dataset], self.part_limit)
        before = {p.number: p for p in ledger}
        written = max((p.number + 1 for p in ledger if p.kind != SUCCESS_MARK), default=0)
        # The first write is an overwrite of an object that is here, so a key that may only create
        # is refused before anything new lands. A window continued here after a move has no part
        # 0000 here, only late parts numbered after the old place's; cut from 0000, the replace
        # would create 0000.. first (holding the late parts' rows) and then be refused on the
        # first late part: those rows twice at this place (sim seed 8005). The parts cut before
        # the first one here are held (at most as many as the window has at the old place).
        first_here = min((p.number for p in ledger if p.kind != SUCCESS_MARK and p.landed), default=0)
        blank = functools.partial(Part, body=empty_body(fmt, DATASETS[dataset]), rows=0)
        sent: set[int] = set()
        cut = 0

        def send(part: Part) -> None:
            keep = dataset == SNAPSHOT_DATASET  # its finish re-sends these bytes (see `deliver`)
            self._overwrite(window_id, keys(part.number), part, tally, before.get(part.number), keep=keep)
            sent.add(part.number)

        try:
            held: list[Part] = []
            parts = iter(writer.parts(batches))
            if first_here > 0:
                for part in parts:
                    cut = part.number + 1
                    if part.number < first_here:
                        held.append(part)
                        continue
                    send(part)  # the first object that is here
                    break
                else:  # the new cut ends before the first part here: that one becomes empty, first
                    send(blank(first_here))
            for part in itertools.chain(held, parts):
                cut = max(cut, part.number + 1)
                if part.number not in sent:
                    send(part)
            for number in range(cut, written):
                if number not in sent:
                    send(blank(number))
        except PermanentError as exc:
            if not sent and not _outcome_unknown(exc) and not isinstance(exc, UntypeableValue):
                # Refused at its first overwrite (a key that may only create): nothing here was
                # replaced, so there is no replace to finish (`runner.run_day` would redo it forever).
                # Not a bad source value before the first part: with a Delta table the replace has
                # taken the window out of the table already (`Runner._unlist_before_replace`), and
                # it is finished once the row is fixed; cleared, nothing named it, and the window
                # stayed in no table (sim seed 56000035).
                self.store.clear_replacing(window_id)
            raise
        finally:
            _close(batches)
        return tally

    def _overwrite(
        self, window_id: int, key: str, part: Part, tally: Tally, previous: PartRecord | None, *, keep: bool
    ) -> None:
        # The guard's reads come before the new intent: a control-plane error there must not leave
        # the new record over a part whose old object still stands (main's sim seed 5000).
        self.guard()
        # An old part still at intent may have its bytes kept for its re-send: put back with it.
        kept = self.store.pending_body(window_id, part.number) if previous and not previous.landed else None
        self._record_intent(window_id, key, part, RANGE_PART, keep=keep)
        try:
            self.overwrite(key, part.body, guarded=True)
        except PermanentError as exc:
            # Refused (a create-only key): the old object is still there, so is its record. Left as
            # the new intent, a later attempt would re-send it, take the 412 for "landed" and count
            # rows the object does not hold as delivered (sim seed 5000). A re-send refused after a
            # lost answer leaves an old object standing too (overwriting it would have needed the
            # right the re-send was refused); only a new name's first send may have created it.
            if isinstance(exc, AccessDenied) and previous is not None:
                exc.outcome_unknown = False  # the old object stands: a definite refusal
            if not _outcome_unknown(exc):
                self._restore(window_id, part.number, previous, kept)
            raise
        self.store.mark_part_landed(window_id, part.number, self.clock())
        tally.landed(part.rows, part.size)
        tally.uploaded(part)

    def _restore(self, window_id: int, number: int, previous: PartRecord | None, kept: bytes | None) -> None:
        """Put back the ledger's record of a part whose overwrite the store refused."""
        if previous is None:
            self.store.forget_part_intent(window_id, number)
            return
        self.store.record_part_intent(
            window_id,
            number=number,
            key=previous.key,
            kind=previous.kind,
            last=previous.last,
            rows=previous.rows,
            size=previous.size,
            md5=previous.md5 or "",
            ids=previous.ids,
            now_ms=self.clock(),
            body=kept,
        )
        if previous.landed:
            self.store.mark_part_landed(window_id, number, self.clock())

    def _resend(
        self, window_id: int, dataset: str, window: Window, p: PartRecord, part: Part
    ) -> tuple[PutOutcome, tuple[int, int]]:
        """Send a part of unknown outcome again under its name, as the bytes it was first sent as;
        returns the answer and the rows and bytes the object now holds.

        Event rows do not change, so ``part`` (cut again from the recorded ids) is those bytes. A
        snapshot part's rows do (a subscriber updated since, sim seed 10000040), so it goes out as
        the bytes kept with its intent: whatever landed under the name is then those bytes
        (without a precondition a re-send of other bytes would replace the part; with one, a new
        cut created under a lost answer would be taken for the recorded one, seed 10001628).
        """
        body = self._as_recorded(window_id, p, part)
        if body is not None:
            return self.create(p.key, body, outcome_unknown=True), (p.rows, p.size)
        # Not kept (a snapshot part recorded before this release kept its bytes on every store):
        # the new cut is the only body there is; with a precondition it cannot replace anything.
        outcome = self.create(p.key, part.body, outcome_unknown=True)
        if outcome != PutOutcome.CREATED:
            return outcome, (p.rows, p.size)
        self._record_intent(window_id, p.key, part, p.kind)
        return outcome, (part.rows, part.size)

    def _as_recorded(self, window_id: int, p: PartRecord, part: Part) -> bytes | None:
        """The bytes the ledger recorded for part ``p``: ``part`` (cut again from its recorded ids)
        when they match, else the bytes kept with its intent, else ``None``."""
        if p.md5 is None or part.content_md5 == p.md5:
            return part.body
        kept = self.store.pending_body(window_id, p.number)
        return kept if kept is not None and content_md5(kept) == p.md5 else None

    def _record_intent(self, window_id: int, key: str, part: Part, kind: str, *, keep: bool = False) -> None:
        """The part ledger's record of ``part`` under ``key``, always before its PUT (``keep``: its
        bytes too, until it lands)."""
        self.store.record_part_intent(
            window_id,
            number=part.number,
            key=key,
            kind=kind,
            last=part.last,
            rows=part.rows,
            size=part.size,
            md5=part.content_md5,
            ids=pack_ids(part.ids),
            now_ms=self.clock(),
            body=part.body if keep else None,
        )


def _may_not_overwrite(exc: AccessDenied) -> AccessDenied:
    refused = AccessDenied(
        f"{exc.message}. Replacing files needs a key that may overwrite; this one may only create "
        "(GCS Storage Object Creator, S3 Object Lock or a create-only bucket policy). "
        "Run the backfill without replace: it delivers what is missing and never overwrites"
    )
    # A refused re-send may follow a first send that created the object (its answer lost): the
    # caller must keep the part's intent, not forget it (sim seed 10000575: forgotten, the next
    # attempt cut the snapshot part afresh and sent other bytes under the landed name).
    refused.outcome_unknown = exc.outcome_unknown
    return refused


def _outcome_unknown(exc: PermanentError) -> bool:
    """Whether a failed PUT may still have created its object."""
    if isinstance(exc, AccessDenied):
        return exc.outcome_unknown
    return isinstance(exc, EndpointTooSlow | ResponseTooLarge)


def _carried_twice(ledger: Sequence[PartRecord]) -> bool:
    """Whether two parts of the ledger (at one location, landed or not) carry the same row."""
    seen: set[str] = set()
    for p in ledger:
        if p.ids is None or p.kind == SUCCESS_MARK:
            continue
        ids = unpack_ids(p.ids)
        if not seen.isdisjoint(ids):
            return True
        seen.update(ids)
    return False


def _one_part(writer: Writer, rows: Iterator[list[Row]], number: int) -> Part:
    """The rows of one recorded part, re-cut; never more than the part limit (they were one part)."""
    parts = list(writer.parts(rows, first=number))
    return parts[0]


def _closing(parts: Iterator[Part], rows: Iterator[list[Row]]) -> Iterator[Part]:
    """``parts``, then the source's ``rows`` closed (also when the caller stops early)."""
    try:
        yield from parts
    finally:
        _close(rows)


def _close(batches: Iterator[object]) -> None:
    close = getattr(batches, "close", None)
    if close is not None:
        close()
