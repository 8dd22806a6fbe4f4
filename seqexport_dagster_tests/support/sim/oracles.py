"""The invariants, checked after every simulated day and at the end (`check_day`, `check_end`).

1. Rows: every source row recorded while its dataset was active is loaded exactly once, by the
   Snowpipe loader (which reloads what an operator's replace rewrote, as docs/customers.md asks)
   and by the window loader (`expected_rows` says which rows are owed at the end:
   a stint still running owes every row up to its position; a stint that ended, by removal or
   deletion, owes the rows that were visible when their window closed, up to its last position).
   No row is ever loaded twice, at any check.
2. Objects: none is replaced (short of an operator's replace), and no PUT without a precondition
   reaches an existing key on a create-only store (`bucket.MemoryBucket` records both as they
   happen); ``_SUCCESS`` is last in its folder.
3. `verify` (`verify_bucket`) of every location, without and with the ledger: no problem, except a
   gap where the dataset was removed and added again at that location.
4. History agrees with the bucket: every part the ledger says landed is there with its MD5.
5. After the quiet end, no active export shows an error.
6. Backoff: between two counted failures of (export, dataset) at least min(frequency × 2^(n−1),
   6 h) passes, unless "export now" was pressed in between (one immediate attempt per press). A
   failure counted by a backfill is an operator's request, run when launched (docs/operators.md,
   "Backfills"): it is not held to the wait, but the scheduler's next retry is held to the wait
   from it (seed 10000006).
7. Webhooks: ``dataset.day_complete`` once per dataset-day, never lost, never before the day's
   objects exist (`webhook_oracle`).
8. Formats: every part of a window (a snapshot day) at a location has one format, and it is one
   the export had between the window's first attempt and its first part's landing: a change
   takes effect at the next window, a window already started keeps its format.
9. Late rows arrive within the documented bound (`delay_oracle`): by the end of the first complete
   scheduled pass of their dataset that starts once they are due, whatever the schedule of runs.
10. Tables (issue 44): every Delta table read with delta-rs holds no row twice, and at the end every
   owed row is in one (`table_oracle`).
11. Delete: from the delete on, nothing reaches the export's locations and no attempt starts; what
   it had delivered stays (rule 4), and it owes the rows of its windows up to its position at the
   delete (rule 1), as docs/cli.md and docs/customers.md promise ("files stay"); a window whose
   operator's replace failed part-way before the delete keeps its half-rewritten files, which
   `verify` reports (docs/operators.md; long run #11 seed 30001365).
12. Bad source values (``wide=2``, `bad_values`): while a row holds a value the contract cannot type,
   no part holding it lands, no window holding it is committed, no later window of its dataset is
   committed (the chain waits at it), every `UntypeableValue` names a row and field bad then and no
   error, status or outcome quotes the value; every value is fixed before the end, and rule 1 holds
   after (everything exactly once).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import format_of_key
from seqexport_dagster.contract.keys import MANIFEST_FOLDER, parse_key
from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window, day_start_ms, iso_ms, parse_iso_ms
from seqexport_dagster.management.verify.bucket import Bucket, StoredObject
from seqexport_dagster.management.verify.checks import PartMemo, verify_bucket
from seqexport_dagster.management.verify.report import Problem
from seqexport_dagster.store import snapshot_window
from seqexport_dagster.store.tables import export_datasets, parts, windows
from seqexport_dagster_tests.support.sim.bad_values import BadCheck, bad_value_violations
from seqexport_dagster_tests.support.sim.bucket import MemoryBucket
from seqexport_dagster_tests.support.sim.delay_oracle import DelayCheck, late_delays
from seqexport_dagster_tests.support.sim.loaders import Loaded, SnowpipeLoader, WindowLoader, ids_of, relative
from seqexport_dagster_tests.support.sim.model import Place, SimExport
from seqexport_dagster_tests.support.sim.table_oracle import TableOracle
from seqexport_dagster_tests.support.sim.webhook_oracle import WebhookOracle
from seqexport_dagster_tests.support.sim.wide import ValueCheck, value_violations
from seqexport_dagster_tests.support.sim.world import World

MAX_BACKOFF_MS = 6 * HOUR_MS
#: Lag + the Snowpipe-style promise: a row is visible to its window's first commit when it was
#: written at most this long after its ``recorded_at``.
ON_TIME_MS = 120_000


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    export: str
    detail: str
    row: str | None = None

    def line(self) -> str:
        return f"[{self.invariant}] {self.export}: {self.detail}"


@dataclass
class Oracles:
    snowpipe: SnowpipeLoader = field(default_factory=SnowpipeLoader)
    values: ValueCheck = field(default_factory=ValueCheck)
    bad: BadCheck = field(default_factory=BadCheck)
    windows: WindowLoader = field(default_factory=WindowLoader)
    rows_checked: int = 0
    verified: int = 0
    #: Parts `verify` read, by format (Parquet goes through `verify.parquet_rows`).
    verified_parts: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)
    webhooks: WebhookOracle = field(default_factory=WebhookOracle)
    delays: DelayCheck = field(default_factory=DelayCheck)
    tables: TableOracle = field(default_factory=TableOracle)
    #: bucket -> key -> when the first send reached it; and how many of its writes were read.
    first_writes: dict[str, dict[str, int]] = field(default_factory=dict)
    writes_read: Counter[str] = field(default_factory=Counter)
    #: Parts `verify` already read, by their bytes: verified again after every day (twice, without
    #: and with the ledger), a part unchanged is not parsed again and adds what it added before.
    part_memo: PartMemo = field(default_factory=dict)

    def poll(self, world: World, *, final: bool = False) -> None:
        for e in world.exports.values():
            self.snowpipe.poll(world.buckets, e.name, e.places)
            self.windows.poll(world.buckets, e.name, e.places, world.clock(), final=final)

    def check_day(self, world: World, *, verify: bool = True, final: bool = False) -> list[Violation]:
        self.poll(world)
        found = [Violation("object", "-", v) for v in world.buckets.violations()]
        for e in world.exports.values():
            found += duplicates(e, "snowpipe", self.snowpipe.by_export[e.name])
            found += [Violation("unreadable part", e.name, u) for u in self.snowpipe.by_export[e.name].unreadable]
            found += duplicates(e, "window loader", self.windows.by_export[e.name])
            found += history_vs_bucket(world, e)
            found += file_formats(e, world, self.landed(world, e))
            found += after_delete(world, e)
            if e.table:
                found += [Violation(k, e.name, d, r) for k, d, r in self.tables.check(world, e, final=final)]
            if verify:
                found += self.verify(world, e, final=final)
        found += backoff(world)
        found += self.webhooks.check(world, Violation)
        if world.bad is not None:  # a row holding a bad value stops its window, delivered nowhere (wide=2)
            found += [
                Violation("bad value", where, detail, row or None)
                for where, detail, row in bad_value_violations(world, world.bad, self.bad)
            ]
        return found

    def check_end(self, world: World) -> list[Violation]:
        found = self.check_day(world, final=True)
        self.poll(world, final=True)
        for e in world.exports.values():
            owed = expected_rows(world, e)
            self.rows_checked += len(owed)
            for loader, loaded in (
                ("snowpipe", self.snowpipe.by_export[e.name]),
                ("window loader", self.windows.by_export[e.name]),
            ):
                found += missing(e, loader, loaded, owed, world)
            landed = self.landed(world, e)
            found += [
                Violation("late beyond bound", e.name, detail, rid)
                for detail, rid in late_delays(world, e, self.snowpipe.by_export[e.name], owed, landed, self.delays)
            ]
            if e.table:
                found += [Violation(k, e.name, d, r) for k, d, r in self.tables.missing(world, e, owed)]
        found += [Violation(k, "-", d, r) for k, d, r in self.tables.duckdb_agrees()]
        found += errors_after_quiet(world)
        if world.bad is not None:
            found += [
                Violation("bad value", s.export, f"row {s.row_id}'s bad {s.field} never fixed", s.row_id)
                for s in world.bad.spoils
                if s.fixed_ms is None
            ]
        if world.wide:  # every row a customer loads equals its source row; none forged (issue 39)
            found += [
                Violation("values", where, detail, row or None)
                for where, detail, row in value_violations(world, self.values)
            ]
        return found

    def landed(self, world: World, e: SimExport) -> dict[str, dict[str, int]]:
        """For each bucket of ``e``: key -> when the first send reached the store (read incrementally)."""
        out = {}
        for name in {p.bucket for p in e.places}:
            bucket = world.buckets.get(name)
            first = self.first_writes.setdefault(name, {})
            for w in bucket.writes[self.writes_read[name] :]:
                first.setdefault(w.key, w.at_ms)
            self.writes_read[name] = len(bucket.writes)
            out[name] = first
        return out

    def verify(self, world: World, e: SimExport, *, final: bool) -> list[Violation]:
        """Every location of the export; ``not_in_ledger`` (a window still being written) only at the end."""
        found: list[Violation] = []
        restarted = {s.dataset for s in e.stints if sum(1 for t in e.stints if t.dataset == s.dataset) > 1}
        latest = {(w.dataset, str(w.window)): w.status for w in world.store.ledger(e.export_id)}
        open_ = {k for k, status in latest.items() if status != "committed"}
        for i, place in enumerate(e.places):
            view = BucketView(world.buckets.get(place.bucket), place)
            if not view.list():
                continue
            # The current place is verified from the bucket alone too, after moves with late rows
            # landing there (issue 47: its manifests prove its own first window); an earlier place
            # keeps what a window restarted at the move left there (no manifest), so it is held
            # to the bucket alone only when the export never moved.
            current = i == len(e.places) - 1
            modes = ([None] if current else []) + ([(world.store, e.export_id)] if current else [])
            for ledger in modes:
                report = verify_bucket(view, ledger=ledger, workers=1, memo=self.part_memo)
                self.verified += 1
                self.verified_parts.update(f for f in map(format_of_key, (o.key for o in view.list())) if f)
                for p in report.problems:
                    if p.kind == "gap" and p.dataset in restarted:
                        continue
                    if p.kind in ("gap", "missing_part") and e.backfilled_after_move:
                        # Known, reported: windows a backfill re-delivers at the new place make
                        # verify take later continued windows for gaps (see docs/operators.md).
                        self.known[p.kind + " after move and backfill"] += 1
                        continue
                    if (
                        p.kind in ("not_in_ledger", "ledger_rows_mismatch")
                        and not final
                        and (p.dataset, p.key) in open_
                    ):
                        continue
                    if p.kind == "missing_success" and not final and (p.dataset, str(_snapshot_day(p.key))) in open_:
                        # Parts landed, ``_SUCCESS`` not yet: the day's attempt is still going
                        # (its answer came too late, a retry follows), as for an open window (seed 10000107).
                        continue
                    what = "verify --ledger" if ledger else "verify"
                    if p.kind == "missing_success" and _snapshot_left_for_good(world, e, _snapshot_day(p.key)):
                        # The day's attempt stopped before its ``_SUCCESS`` and the dataset was
                        # removed (or the export deleted) before a retry: the day stays incomplete
                        # at this place, which `verify` rightly reports; the day was complete where
                        # it was committed before (seed 10000436: a replace at a new place, then
                        # `subscribers` removed). Not a lost row: rows are owed by event windows.
                        self.known["snapshot day left incomplete by a removal"] += 1
                        continue
                    unlisted = _unlisted_window(p)
                    if unlisted is not None and not final and (p.dataset, str(unlisted)) in open_:
                        # Parts landed, the manifest not yet: the window's attempt is still going
                        # (a crash or a lost answer, its retry to come), as for ``not_in_ledger``.
                        continue
                    if unlisted is not None and _failed_backfill(world, e, p.dataset, unlisted):
                        # A backfill at this place failed after some parts landed, before its
                        # manifest and commit; nothing but the operator re-running it comes back to a
                        # window committed elsewhere (seed 6: a control-plane outage during a
                        # backfill after a move). verify rightly says the window is incomplete here.
                        self.known["parts of a failed backfill without a manifest"] += 1
                        continue
                    if unlisted is not None and _left_for_good(world, e, p.dataset, unlisted):
                        # Parts landed, then the export was deleted (or the dataset removed) before
                        # that attempt's commit and manifest: files stay, and no attempt comes back
                        # to list them (docs/customers.md, "files stay": `no_manifest`).
                        self.known["parts left without a manifest by a delete or a removal"] += 1
                        continue
                    if (
                        p.kind == "gap"
                        and not final
                        and current
                        and _gap_ahead_of_position(world, e, p.dataset, p.detail)
                    ):
                        # A backfill delivered windows after the dataset's position while the
                        # scheduler was still retrying the window at it (seed 10000464: a key
                        # revoked at the window's run, a backfill of the next day once it came
                        # back). The scheduler fills it; the end holds it strictly.
                        self.known["gap ahead of the position (a backfill ran ahead)"] += 1
                        continue
                    if p.kind == "duplicate_id" and (
                        left := _in_unfinished_replace(world, e, view, p.dataset, p.key, final=final)
                    ):
                        # docs/customers.md: a rewrite that fails part-way shows as the export's
                        # error until the next runs finish it; reload once the day shows no error
                        # (seed 10000315: a replace paused after part 0000, the old late part
                        # still beside it). The end holds it strictly, unless the export was deleted
                        # (or the dataset removed) before a run finished it (long run #11 seed
                        # 30001365): nothing comes back to it, and its files stay as they are.
                        self.known[f"duplicate id inside a replace {left}"] += 1
                        continue
                    if p.kind == "manifest_mismatch" and (
                        left := _replace_unfinished_at(world, e, place, p.dataset, p.key, final=final)
                    ):
                        # The same rule for a part an unfinished replace overwrote (with fewer rows, or
                        # the empty file of a part number the new cut no longer needs, or with the late
                        # rows of the parts it had not reached yet): the window's manifests are rewritten
                        # when the replace commits (long run #10 seed 20001161: a backfill replace
                        # failed part-way in a fault storm, finished by a later run).
                        self.known[f"manifest mismatch inside a replace {left}"] += 1
                        continue
                    if (
                        p.kind == "ledger_rows_mismatch"
                        and (window := _window_of(p.key)) is not None
                        and _replace_left(world, e, place, p.dataset, window, final=True)
                    ):
                        # The ledger's count of the same window: the replace's new part 0000 carries
                        # the late rows its old late parts still carry (long run #11 seed 30001365).
                        self.known["ledger rows mismatch inside a replace left by a delete or a removal"] += 1
                        continue
                    row = p.key if p.kind == "duplicate_id" else None  # traced like a row loaded twice
                    found.append(
                        Violation(what, e.name, f"{place.source}: {p.kind} {p.dataset} {p.key}: {p.detail}", row)
                    )
        return found


def _latest_attempts(world: World, e: SimExport, dataset: str) -> dict[tuple[int, int], sa.Row[Any]]:
    """(from_ms, to_ms) -> the window's latest attempt (status, started_at, replacing) in the ledger."""
    t = windows
    with world.engine.connect() as conn:
        attempts = conn.execute(
            sa.select(t.c.from_ms, t.c.to_ms, t.c.status, t.c.started_at, t.c.replacing, t.c.run_id)
            .where(t.c.export_id == e.export_id, t.c.dataset == dataset)
            .order_by(t.c.id)
        ).all()
    return {(a.from_ms, a.to_ms): a for a in attempts}


def _snapshot_left_for_good(world: World, e: SimExport, day: Window) -> bool:
    """Whether the snapshot day's latest attempt never committed and nothing will retry it: the
    export was deleted, or ``subscribers`` was removed after that attempt started (and not added
    again before it)."""
    return _left_for_good(world, e, "subscribers", day)


def _failed_backfill(world: World, e: SimExport, dataset: str, window: Window) -> bool:
    last = _latest_attempts(world, e, dataset).get((window.from_ms, window.to_ms))
    return last is not None and last.status == "failed" and str(last.run_id or "").startswith("backfill")


def _unlisted_window(p: Problem) -> Window | None:
    """The window of a ``no_manifest`` or ``unlisted_part`` problem: parts no manifest lists yet."""
    if p.kind == "unlisted_part":
        parsed = parse_key(p.key)
        return parsed.window if parsed is not None else None
    found = re.fullmatch(r"window \((\S+), (\S+)\]", p.key) if p.kind == "no_manifest" else None
    return None if found is None else Window(parse_iso_ms(found.group(1)), parse_iso_ms(found.group(2)))


def _window_of(text: str) -> Window | None:
    """The window of a problem's key written as ``(from, to]`` (ISO times)."""
    found = re.fullmatch(r"\((\S+), (\S+)\]", text)
    return None if found is None else Window(parse_iso_ms(found.group(1)), parse_iso_ms(found.group(2)))


def _left_for_good(world: World, e: SimExport, dataset: str, window: Window) -> bool:
    last = _latest_attempts(world, e, dataset).get((window.from_ms, window.to_ms))
    return last is not None and last.status != "committed" and _ended_after(e, dataset, last.started_at)


def _gap_ahead_of_position(world: World, e: SimExport, dataset: str, detail: str) -> bool:
    """Whether the gap `verify` describes (``no window covers (a, b]``) starts at or after the
    dataset's position: windows the scheduler has still to deliver."""
    found = re.search(r"no window covers \((\d+), (\d+)\]", detail)
    state = world.store.get_export(e.export_id).dataset_state(dataset)
    return found is not None and state is not None and int(found.group(1)) >= state.position_ms


def _in_unfinished_replace(
    world: World, e: SimExport, view: BucketView, dataset: str, row_id: str, *, final: bool
) -> str | None:
    """Whether every object of ``view`` carrying ``row_id`` belongs to a window whose operator's
    replace has not committed (`_replace_left`): how it was left, or None."""
    how: set[str | None] = set()
    for obj in view.list():
        parsed = parse_key(obj.key)
        if parsed is None or parsed.dataset != dataset or parsed.window is None or parsed.part is None:
            continue
        if row_id in ids_of(obj.key, view.read(obj.key)):
            how.add(_replace_left(world, e, view.place, dataset, parsed.window, final=final))
    return how.pop() if len(how) == 1 else ("unfinished" if how and None not in how else None)


def _replace_unfinished_at(
    world: World, e: SimExport, place: Place, dataset: str, key: str, *, final: bool
) -> str | None:
    """Whether the part ``key`` belongs to a window whose operator's replace has not committed
    (`_replace_left`): how it was left, or None."""
    parsed = parse_key(key)
    if parsed is None or parsed.window is None:
        return None
    return _replace_left(world, e, place, dataset, parsed.window, final=final)


def _replace_left(
    world: World, e: SimExport, place: Place, dataset: str, window: Window, *, final: bool, moved: bool = False
) -> str | None:
    """ "unfinished": an attempt of the window at ``place`` overwrote parts as an operator's replace
    and no attempt committed the window there since (the product's `replace_unfinished`: a retry of
    the replace that failed before it marked itself does not hide it, long run #11 seed 30001365);
    mid-run only, the next runs finish it. "left by a delete or a removal": the same, and the export was deleted
    (or the dataset removed) after that replace started, and no run went on with the dataset there
    since the window's last attempt (a commit there, `_committed_since`, and a reconciliation pass
    run to its end, `_reconciled_since`), so no run ever finishes it (files stay).
    None: no such replace, or at the end one a run could still have finished. ``moved``: ``place``
    is one the export left, where nothing finishes the replace; a reconciliation pass at a later
    place that ran to its end since takes the window into its table (`delivery.table_moves.replaced_rows`),
    so only a delete or a removal before any such pass leaves it out of every table."""
    t = windows
    with world.engine.connect() as conn:
        attempts = conn.execute(
            sa.select(t.c.id, t.c.status, t.c.started_at, t.c.replacing)
            .where(t.c.export_id == e.export_id, t.c.dataset == dataset, t.c.location == place.location)
            .where(t.c.from_ms == window.from_ms, t.c.to_ms == window.to_ms)
            .order_by(t.c.id)
        ).all()
    replaces = [a for a in attempts if a.replacing]
    if not replaces or any(a.id > replaces[-1].id and a.status == "committed" for a in attempts):
        return None
    last = attempts[-1]
    went_on = (moved or _committed_since(world, e, place, dataset, last.id)) and _reconciled_since(
        world, e, dataset, last.started_at
    )
    if _ended_after(e, dataset, replaces[-1].started_at) and not went_on:
        return "left by a delete or a removal"
    return None if final else "unfinished"


def _committed_since(world: World, e: SimExport, place: Place, dataset: str, after_id: int) -> bool:
    """Whether an attempt of ``dataset`` at ``place`` (any window) committed after attempt ``after_id``:
    a run that went on with the dataset there, whose reconciliation finishes an unfinished replace
    (`reconcile`: `windows_replace_unfinished`), so one still unfinished was not left by the end alone."""
    t = windows
    with world.engine.connect() as conn:
        found = conn.execute(
            sa.select(t.c.id)
            .where(t.c.export_id == e.export_id, t.c.dataset == dataset, t.c.location == place.location)
            .where(t.c.id > after_id, t.c.status == "committed")
            .limit(1)
        ).first()
    return found is not None


def _reconciled_since(world: World, e: SimExport, dataset: str, at_ms: int) -> bool:
    """Whether a scheduled run's reconciliation pass of ``dataset`` ran to its end (`reconcile`
    marks the dataset reconciled only then) at or after ``at_ms``. A run that committed its due
    window and then stopped its pass at an older window (an error permanent for the run, such as
    a store too slow to answer) never came to the replace; the delete before the next run left it
    (long run #12 seed 48000027)."""
    t = export_datasets
    with world.engine.connect() as conn:
        last = conn.execute(
            sa.select(sa.func.max(t.c.reconciled_at)).where(t.c.export_id == e.export_id, t.c.dataset == dataset)
        ).scalar()
    return last is not None and int(last) >= at_ms


def _ended_after(e: SimExport, dataset: str, at_ms: int) -> bool:
    """Whether the export was deleted, or ``dataset`` removed and not added again, after ``at_ms``."""
    if e.deleted_at is not None:
        return True
    stints = [s for s in e.stints if s.dataset == dataset]
    return any(s.ended_at is not None and s.ended_at >= at_ms for s in stints) and not any(
        s.ended_at is None and s.added_at <= at_ms for s in stints
    )


def _snapshot_day(key: str) -> Window:
    """The ledger's window of the snapshot day whose ``_SUCCESS`` is ``key`` (``subscribers/date=…/_SUCCESS``)."""
    day = key.split("date=", 1)[1].split("/", 1)[0]
    return Window.whole_day(dt.date.fromisoformat(day))


class BucketView(Bucket):
    """One simulated location as `verify` reads it (keys relative to the prefix)."""

    def __init__(self, bucket: MemoryBucket, place: Place) -> None:
        self.bucket, self.place = bucket, place
        self.source = place.url
        self.head = place.prefix + "/" if place.prefix else ""

    def _pages(self) -> Iterator[list[StoredObject]]:
        yield [
            StoredObject(k[len(self.head) :], len(b), 0)
            for k, b in self.bucket.objects.items()
            if k.startswith(self.head) and not k[len(self.head) :].startswith("_sequenzy/")
        ]

    def _manifest_pages(self) -> Iterator[list[StoredObject]]:
        """The window manifests, so `verify` proves completeness from this bucket alone."""
        folder = self.head + MANIFEST_FOLDER + "/"
        yield [
            StoredObject(k[len(self.head) :], len(b), 0) for k, b in self.bucket.objects.items() if k.startswith(folder)
        ]

    def read(self, key: str, limit: int | None = None) -> bytes:
        return self.bucket.objects[self.head + key]


def duplicates(e: SimExport, loader: str, loaded: Loaded) -> list[Violation]:
    out = []
    for (dataset, rid), where in loaded.rows.items():
        if dataset not in EVENT_DATASETS or len(where) < 2 or _replaced(e, where):
            continue
        # Across locations a row may be delivered again (a window restarted at the new place, a
        # backfill after a move): exactly once holds per location.
        spots = [p.source for w in where for p in e.places if w.startswith(p.source + "/")]
        if len(set(spots)) < len(spots):
            out.append(Violation("row loaded twice", e.name, f"{loader}: {dataset} {rid} from {', '.join(where)}", rid))
    return out


def _replaced(e: SimExport, where: Iterable[str]) -> bool:
    return any(f"date={day}/" in w for w in where for day in e.replaced_days)


def expected_rows(world: World, e: SimExport) -> dict[tuple[str, str], int]:
    """(dataset, id) -> recorded_at of every event row the export owes at the end."""
    record = world.store.get_export(e.export_id)
    owed: dict[tuple[str, str], int] = {}
    for row in world.source.rows.values():
        if row.account_id != e.account_id:
            continue
        for s in e.stints:
            if s.dataset != row.dataset or row.recorded_ms <= s.added_at:
                continue
            if s.ended_at is None:
                state = record.dataset_state(s.dataset)
                if state is not None and row.recorded_ms <= state.position_ms:
                    owed[(row.dataset, row.id)] = row.recorded_ms
            elif s.end_position is not None and row.recorded_ms <= s.end_position and row.late_ms <= ON_TIME_MS:
                owed[(row.dataset, row.id)] = row.recorded_ms
    return owed


def missing(
    e: SimExport, loader: str, loaded: Loaded, owed: dict[tuple[str, str], int], world: World
) -> list[Violation]:
    out = []
    for (dataset, rid), _ in sorted(owed.items(), key=lambda kv: kv[1]):
        n = len(loaded.rows.get((dataset, rid), []))
        if n == 0:
            row = world.source.rows[rid]
            late = f"late by {row.late_ms // 60_000} min" if row.late_ms > ON_TIME_MS else "on time"
            out.append(Violation("row lost", e.name, f"{loader}: {dataset} {rid} ({late}) never loaded", rid))
    return out


def history_vs_bucket(world: World, e: SimExport) -> list[Violation]:
    places = {p.location: p for p in e.places}
    out = []
    with world.engine.connect() as conn:
        rows = conn.execute(
            sa.select(parts.c.key, parts.c.location, parts.c.md5, parts.c.status).where(
                parts.c.export_id == e.export_id
            )
        ).all()
    for r in rows:
        if r.status != "landed":
            continue
        place = places.get(r.location)
        if place is None:
            out.append(Violation("history", e.name, f"ledger part {r.key} at an unknown location {r.location}"))
            continue
        body = world.buckets.get(place.bucket).objects.get(r.key)
        if body is None:
            out.append(Violation("history", e.name, f"ledger says {r.key} landed; it is not in {place.bucket}"))
        elif r.md5 and base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode() != r.md5:
            if not _replaced(e, [r.key]):
                out.append(Violation("history", e.name, f"{r.key} in the bucket differs from the ledger's MD5"))
    return out


def errors_after_quiet(world: World) -> list[Violation]:
    out = []
    for e in world.live():
        record = world.store.get_export(e.export_id)
        if record.status != "active":
            continue
        for s in record.datasets:
            if s.failures or s.last_error:
                out.append(Violation("error after faults stopped", e.name, f"{s.dataset}: {s.last_error}"))
    return out


def backoff(world: World) -> list[Violation]:
    out = []
    for (name, dataset), seen in world.failures.items():
        presses = world.export_now_at.get(name, [])
        for before, after in zip(seen, seen[1:], strict=False):
            if not before.failures or after.failures != before.failures + 1:
                continue
            if after.operator:  # a backfill runs when the operator launches it (rule 6; seeds 8002, 10000006)
                continue
            wait = min(before.frequency_ms * 2 ** (before.failures - 1), MAX_BACKOFF_MS)
            pressed = [t for t in presses if before.at_ms < t <= after.at_ms]
            gap = after.at_ms - before.at_ms
            if gap < wait and not pressed:
                out.append(
                    Violation(
                        "backoff",
                        name,
                        f"{dataset}: failure {after.failures} at {iso_ms(after.at_ms)}, {gap // 60_000} min after "
                        f"failure {before.failures}; backoff allows a retry only after {wait // 60_000} min",
                    )
                )
    return out


def file_formats(e: SimExport, world: World, landed: dict[str, dict[str, int]]) -> list[Violation]:
    """Rule 7 of the module docstring, from the bucket, the simulator's own record of the export's
    formats, and the ledger's first attempt of each window (any location)."""
    t = windows
    with world.engine.connect() as conn:
        started = {
            (r.dataset, r.from_ms, r.to_ms): r.first
            for r in conn.execute(
                sa.select(t.c.dataset, t.c.from_ms, t.c.to_ms, sa.func.min(t.c.started_at).label("first"))
                .where(t.c.export_id == e.export_id)
                .group_by(t.c.dataset, t.c.from_ms, t.c.to_ms)
            )
        }
    out = []
    for place in e.places:
        groups: dict[tuple[str, Window], dict[str, list[str]]] = {}
        for key in world.buckets.get(place.bucket).objects:
            rel = relative(place, key)
            parsed = parse_key(rel) if rel is not None else None
            if parsed is None or parsed.format is None:
                continue
            window = parsed.window or snapshot_window(day_start_ms(dt.date.fromisoformat(parsed.date)))
            groups.setdefault((parsed.dataset, window), {}).setdefault(parsed.format, []).append(key)
        for (dataset, window), by_format in groups.items():
            where = f"{place.source}: {dataset} {window}"
            if len(by_format) > 1:
                names = ", ".join(sorted(k.rsplit("/", 1)[-1] for ks in by_format.values() for k in ks))
                out.append(Violation("window split across formats", e.name, f"{where}: {names}"))
                continue
            first_attempt = started.get((dataset, window.from_ms, window.to_ms))
            if first_attempt is None:  # its ledger rows were compacted: the split check above only
                continue
            ((fmt, keys),) = by_format.items()
            first_landed = min(landed[place.bucket].get(k, 0) for k in keys)
            allowed = e.formats_between(first_attempt, first_landed)
            if fmt not in allowed:
                out.append(
                    Violation(
                        "format",
                        e.name,
                        f"{where} is in {fmt}; between its first attempt ({iso_ms(first_attempt)}) and its "
                        f"first part's landing ({iso_ms(first_landed)}) the export's format was {sorted(allowed)}",
                    )
                )
    return out


def after_delete(world: World, e: SimExport) -> list[Violation]:
    """Rule 8 of the module docstring: nothing written and no attempt started from the delete on."""
    if e.deleted_at is None:
        return []
    out = []
    for place in e.places:
        head = place.prefix + "/"
        late = [w for w in world.buckets.get(place.bucket).writes if w.at_ms >= e.deleted_at and w.key.startswith(head)]
        if late:
            out.append(
                Violation(
                    "written after delete",
                    e.name,
                    f"{len(late)} send(s) reached {place.source} after the delete at {iso_ms(e.deleted_at)}, the "
                    f"first at {iso_ms(late[0].at_ms)}: {late[0].key}",
                )
            )
    t = windows
    with world.engine.connect() as conn:
        started = conn.execute(
            sa.select(t.c.dataset, t.c.from_ms, t.c.to_ms, t.c.started_at)
            .where(t.c.export_id == e.export_id, t.c.started_at >= e.deleted_at)
            .order_by(t.c.started_at)
        ).all()
    if started:
        first = started[0]
        out.append(
            Violation(
                "worked after delete",
                e.name,
                f"{len(started)} window attempt(s) started after the delete at {iso_ms(e.deleted_at)}, the first "
                f"{first.dataset} {Window(first.from_ms, first.to_ms)} at {iso_ms(first.started_at)}",
            )
        )
    status = world.store.get_export(e.export_id).status
    if status != "deleted":
        out.append(Violation("worked after delete", e.name, f"status is {status} after the delete"))
    return out
