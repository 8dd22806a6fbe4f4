"""Bad source values (the widened world with ``wide=2``): a value the row contract cannot type is
written into a source row, and fixed at the source some minutes to hours later.

The policy (`delivery.values`, `errors.UntypeableValue`; docs/operators.md, docs/customers.md): the
row stops its window with `UntypeableValue` naming the row and field, never the value; the window
is not committed, nothing of it from the bad row on is delivered, nothing is dropped or altered;
once the row is fixed the export retries after its backoff and delivers everything exactly once.

`BadValues.step` draws from a stream of its own (``Random(f"{seed}/badvalues")``) and only worlds
built with ``wide=2`` have one, so every older seed (``wide`` 0 or 1) keeps its history. Such a
world also draws its part limit from that stream (`PART_LIMITS`): windows of many parts are where a
bad row stops a window after parts of it landed, and the retry after the fix must continue after
the last landed part (on a SQLite source, Parquet windows stop in the C reader, `sqlite_read`, and
continue as Python rows, `reader._sqlite_record_batches`).

Kinds (`KINDS`), each surviving the source tables' text affinity: a BLOB in a text field, text that
is not UTF-8 (``CAST(x'..' AS TEXT)``: a lone 0xff, a surrogate, an overlong form, a cut sequence),
and in ``properties`` JSON that is not one object. Timestamps are left out: a bad ``recorded_at``
moves the row out of its window. Every bad value carries a marker (``BADVAL0001``), so the oracle
can tell that no status, history or error text the simulator sees ever quotes it. On PostgreSQL
only the JSON kinds are drawn (it keeps no BLOB and no invalid UTF-8 in text columns).

The fix writes the row's own value back: a part cut before the value went bad (an intent whose
outcome is unknown, a Delta table's recut) is cut again to the same bytes.

`bad_value_violations` is the oracle: while a row holds a bad value no part holding it lands, no
window holding it is committed by an export that had not delivered it before, and every
`UntypeableValue` in the ledger names a row and field that were bad then, in the window of the row.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import format_of_key
from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.writer import PART_LIMIT
from seqexport_dagster.store import COMMITTED
from seqexport_dagster_tests.support.sim.loaders import ids_of

#: Per loop step (4 to 16 simulated minutes) before the quiet end: about 5 bad values a day.
BAD_VALUE_RATE: Final = 0.04
#: The part limits a ``wide=2`` world draws from: the contract's, and small ones (many parts a window).
PART_LIMITS: Final = (PART_LIMIT, 3, 8, 25)
#: What every bad value carries, numbered: never to be seen in an error, status or history text.
MARKER: Final = "BADVAL"
#: The text fields a bad value is written into, by dataset (the table's other fields are keys,
#: timestamps that place the row, or enums).
FIELDS: Final = {
    "email_events": ("email", "subject", "user_agent"),
    "sms_events": ("phone", "reply_text"),
    "custom_events": ("name", "email", "properties", "properties"),
}
#: kind -> the bytes after the marker, for text that is not UTF-8.
NOT_UTF8: Final = {
    "lone 0xff": b"\xff",
    "surrogate": b"\xed\xa0\x80",
    "overlong": b"\xc0\xaf",
    "cut sequence": b"\xe2\x82",
}
JSON_KINDS: Final = ("broken json", "json array")
_NAMED: Final = re.compile(r"row '([^']*)': field (\w+) holds a value that is not")


@dataclass
class Spoil:
    """One bad value: written at ``at_ms`` into ``field`` of row ``row_id``, fixed at ``fixed_ms``."""

    export: str  # the name of the export whose account and dataset drew it
    row_id: str
    dataset: str
    field: str
    kind: str
    marker: str
    at_ms: int
    fix_due_ms: int
    original: Any
    fixed_ms: int | None = None

    def bad_at(self, t_ms: int) -> bool:
        return self.at_ms <= t_ms < (self.fixed_ms if self.fixed_ms is not None else 1 << 62)


@dataclass
class BadValues:
    rng: random.Random
    engine: sa.Engine
    spoils: list[Spoil] = field(default_factory=list)
    part_limit: int = PART_LIMIT

    def __post_init__(self) -> None:
        self.part_limit = self.rng.choice(PART_LIMITS)

    @property
    def fixed(self) -> int:
        return sum(1 for s in self.spoils if s.fixed_ms is not None)

    def step(self, world: Any, now_ms: int, *, quiet: bool) -> None:
        """Fix the values whose time came; before the quiet end, perhaps spoil a row."""
        for s in self.spoils:
            if s.fixed_ms is None and s.fix_due_ms <= now_ms:
                self._write(s.dataset, s.row_id, s.field, s.original)
                s.fixed_ms = now_ms
                world.log(s.export, "fix bad value", f"{s.dataset} {s.row_id} {s.field}")
        if quiet or self.rng.random() >= BAD_VALUE_RATE:
            return
        live = [e for e in world.live() if any(e.stint(d) for d in EVENT_DATASETS)]
        if not live:
            return
        e = self.rng.choice(live)
        dataset = self.rng.choice([d for d in EVENT_DATASETS if e.stint(d)])
        bad = {s.row_id for s in self.spoils if s.fixed_ms is None}
        rows = [
            r
            for r in world.source.rows.values()
            if r.dataset == dataset and r.account_id == e.account_id and r.id not in bad
            and r.inserted_ms >= now_ms - world.lateness_ms
        ]  # fmt: skip
        new = [r for r in rows if r.inserted_ms == now_ms]
        pool = new if new and self.rng.random() < 0.6 else rows
        if not pool:
            return
        row = self.rng.choice(pool)
        field_name = self.rng.choice(FIELDS[dataset])
        sqlite = self.engine.dialect.name == "sqlite"
        kinds = ["blob", *NOT_UTF8] if sqlite else []
        if field_name == "properties":
            kinds += JSON_KINDS
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        marker = f"{MARKER}{len(self.spoils) + 1:04d}"
        original = self._read(dataset, row.id, field_name)
        fix_due = now_ms + self.rng.randrange(10 * MINUTE_MS, 8 * HOUR_MS)
        spoil = Spoil(e.name, row.id, dataset, field_name, kind, marker, now_ms, fix_due, original)
        self._write(dataset, row.id, field_name, _value(kind, marker), text=kind in NOT_UTF8)
        self.spoils.append(spoil)
        minutes = (fix_due - now_ms) // MINUTE_MS
        world.log(e.name, "bad value", f"{kind} in {dataset} {row.id} {field_name}, fixed in {minutes} min")

    def _read(self, dataset: str, row_id: str, field_name: str) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(f"SELECT {field_name} FROM {dataset} WHERE id = :id"), {"id": row_id}).scalar()

    def _write(self, dataset: str, row_id: str, field_name: str, value: Any, *, text: bool = False) -> None:
        # ``CAST(... AS TEXT)`` of a BLOB keeps its bytes as they are: text that is not UTF-8.
        target = "CAST(:v AS TEXT)" if text else ":v"
        with self.engine.begin() as conn:
            conn.execute(
                sa.text(f"UPDATE {dataset} SET {field_name} = {target} WHERE id = :id"), {"v": value, "id": row_id}
            )


def _value(kind: str, marker: str) -> Any:
    if kind == "blob":
        return marker.encode() + b"\x00\xff"
    if kind in NOT_UTF8:
        return marker.encode() + NOT_UTF8[kind]
    if kind == "broken json":
        return "{broken " + marker
    return f'["{marker}"]'  # valid JSON, not one object


@dataclass
class BadCheck:
    """What the bad-value oracle saw: windows refused with `UntypeableValue` by file format, those of
    them refused after parts of the window had landed, and the (export, window) pairs counted."""

    refused: dict[str, int] = field(default_factory=dict)
    after_part: dict[str, int] = field(default_factory=dict)
    counted: set[int] = field(default_factory=set)


def bad_value_violations(world: Any, bad: BadValues, check: BadCheck) -> list[tuple[str, str, str]]:
    """``(export or bucket, detail, row id)`` for every breach of the policy the module docstring states."""
    if not bad.spoils:
        return []
    found: list[tuple[str, str, str]] = []
    spoils: dict[str, list[Spoil]] = {}
    for s in bad.spoils:
        spoils.setdefault(s.row_id, []).append(s)
    # Every part (and table file) in every bucket: when it landed, and the spoiled rows it holds.
    holding: dict[tuple[str, str], int] = {}  # (bucket, row id) -> first landing
    landed: dict[tuple[str, str], list[tuple[int, str]]] = {}  # (bucket, part name stem) -> (at, key)
    for bucket in world.buckets.by_name.values():
        # When each key's body landed: a re-send of the same bytes (a store without preconditions
        # overwrites) is not a new body (seed 56000277); and when the key first landed at all.
        body_at: dict[str, int] = {}
        first_at: dict[str, int] = {}
        for write in bucket.writes:
            if write.answer == "created" or (write.answer == "overwritten" and not write.same_body):
                body_at[write.key] = write.at_ms
                first_at.setdefault(write.key, write.at_ms)
        for key, body in bucket.objects.items():
            if not key.endswith((".jsonl.gz", ".parquet")) or "/_delta_log/" in key:
                continue  # not rows (a manifest, _SUCCESS, a Delta log's checkpoint)
            at = body_at.get(key, bucket.body_at.get(key, 0))
            stem = key.rsplit("/", 1)[-1].rsplit("-", 1)[0]
            landed.setdefault((bucket.name, stem), []).append((at, key))
            try:
                ids = ids_of(key, body)
            except Exception as exc:  # a bad value delivered as it was: the part cannot be read
                found.append((bucket.name, f"{key} cannot be read: {type(exc).__name__}", ""))
                continue
            for rid in spoils.keys() & set(ids):
                first = holding.get((bucket.name, rid))
                since = first_at.get(key, at)
                holding[(bucket.name, rid)] = since if first is None else min(first, since)
                for s in spoils[rid]:
                    if s.bad_at(at):
                        found.append((bucket.name, f"{key} landed holding row {rid} while its {s.field} was bad", rid))
    for e in world.exports.values():
        buckets = {p.bucket for p in e.places}
        by_dataset: dict[str, list[Any]] = {}
        for w in world.store.ledger(e.export_id):
            by_dataset.setdefault(w.dataset, []).append(w)
            found += _error_text(world, e, w, spoils, landed, check)
        state = world.store.get_export(e.export_id)
        for s in state.datasets:
            if s.last_error and MARKER in s.last_error:
                found.append((e.name, f"{s.dataset}'s status quotes a bad value: {s.last_error[:200]!r}", ""))
        for rid, rs in spoils.items():
            row = world.source.rows[rid]
            if row.account_id != e.account_id:
                continue
            for s in rs:
                if any(holding.get((b, rid), 1 << 62) < s.at_ms for b in buckets):
                    continue  # delivered before it went bad: no attempt reads it again
                commits = [
                    w for w in by_dataset.get(s.dataset, ()) if w.status == COMMITTED and w.finished_at is not None
                ]
                holds = [w for w in commits if w.window.from_ms < row.recorded_ms <= w.window.to_ms]
                for w in holds:
                    if s.bad_at(w.finished_at):
                        found.append((e.name, f"{s.dataset} window {w.window} committed while row {rid} was bad", rid))
                found += _chain_went_past(e, s, row.recorded_ms, commits, holds)
    found += [
        ("-", f"an operation's outcome quotes a bad value: {op.line()[:200]!r}", "")
        for op in world.ops
        if MARKER in op.outcome
    ]
    return found


def _error_text(
    world: Any,
    e: Any,
    w: Any,
    spoils: dict[str, list[Spoil]],
    landed: dict[tuple[str, str], list[tuple[int, str]]],
    check: BadCheck,
) -> list[tuple[str, str, str]]:
    """A window attempt's error: never a bad value; an `UntypeableValue` names a row and field bad then,
    in that window. Counted once per attempt, by the format of its window."""
    if not w.error:
        return []
    if MARKER in w.error:
        return [(e.name, f"the history of {w.dataset} window {w.window} quotes a bad value: {w.error[:200]!r}", "")]
    named = _NAMED.search(w.error)
    if named is None:
        return []
    rid, field_name = named.group(1), named.group(2)
    at = w.finished_at if w.finished_at is not None else w.started_at
    row = world.source.rows.get(rid)
    bad_then = [s for s in spoils.get(rid, ()) if s.field == field_name and s.bad_at(at)]
    if row is None or not w.window.from_ms < row.recorded_ms <= w.window.to_ms or not bad_then:
        return [
            (e.name, f"{w.dataset} window {w.window} refused naming row {rid} field {field_name}, not bad then", rid)
        ]
    if w.id not in check.counted:
        check.counted.add(w.id)
        stem = f"{w.dataset}-{w.window.from_ms}-{w.window.to_ms}"
        window_keys = [(t, key) for b in {p.bucket for p in e.places} for t, key in landed.get((b, stem), ())]
        # Parts of the window that landed while the row was bad: those cut before it (a part boundary
        # before the bad row), which the retry after the fix must continue after.
        cut_before = [key for t, key in window_keys if bad_then[0].at_ms <= t <= at]
        keys = [key for _, key in window_keys]
        fmt = format_of_key(keys[0]) if keys else next(iter(sorted(e.formats_between(at, at))))
        check.refused[fmt] = check.refused.get(fmt, 0) + 1
        if cut_before:
            check.after_part[fmt] = check.after_part.get(fmt, 0) + 1
    return []


def _chain_went_past(
    e: Any, s: Spoil, recorded_ms: int, commits: list[Any], holds: list[Any]
) -> list[tuple[str, str, str]]:
    """A bad row ahead of its dataset's position stops the chain there: windows of a dataset are
    committed in order (`planner.windows_due` continues from the position), so while the row is bad no
    later window of the stint that owes it is committed. A row that went bad in a window already
    committed (a late row) is the reconciliation's, which holds back no later window."""
    if any(w.finished_at < s.at_ms for w in holds):
        return []
    stint = next(
        (
            t
            for t in e.stints
            if t.dataset == s.dataset and t.added_at < recorded_ms and (t.ended_at or 1 << 62) > s.at_ms
        ),
        None,
    )
    if stint is None:
        return []  # not owed by the export when it went bad
    ended = stint.ended_at or 1 << 62
    return [
        (e.name, f"{s.dataset} window {w.window} after row {s.row_id} committed while the row was bad", s.row_id)
        for w in commits
        if w.window.from_ms >= recorded_ms and s.bad_at(w.finished_at) and w.finished_at < ended
    ]
