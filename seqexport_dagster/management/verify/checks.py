"""The checks: every guarantee of the bucket contract, re-derived from the objects alone.

Objects are classified by name (`keys.parse_key`), then each event dataset's windows are checked as
a chain and each snapshot day for its ``_SUCCESS``, and every part is read once, in order, with a few
reads in flight. Problems are aggregated per object (see `seqexport_dagster.management.verify`).

Size: the checks of both part formats, manifests and continued windows share one pass over the
objects; kept whole this round, to be split with issue 28.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from seqexport_dagster.contract.file_format import PARQUET, extension
from seqexport_dagster.contract.keys import SNAPSHOT_DATASET, SUCCESS_NAME, parse_key
from seqexport_dagster.contract.schema import DATASETS, Dataset
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.delivery.writer import PART_LIMIT
from seqexport_dagster.errors import ExportError, ObjectTooLarge, ParquetProblem
from seqexport_dagster.management.verify.azure_bucket import open_azure_bucket
from seqexport_dagster.management.verify.bounds import DEFAULT_LIMITS, Limits, gzip_lines
from seqexport_dagster.management.verify.bucket import Bucket, LocalBucket, StoredObject, open_bucket, prefetch
from seqexport_dagster.management.verify.ledger import ledger_problems
from seqexport_dagster.management.verify.manifests import manifest_problems
from seqexport_dagster.management.verify.parquet_rows import parquet_rows
from seqexport_dagster.management.verify.report import DatasetSummary, Problem, VerifyReport
from seqexport_dagster.management.verify.row import row_problem
from seqexport_dagster.management.verify.table import is_table_object, verify_tables
from seqexport_dagster.progress import Advance, no_progress

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane

PARQUET_EXTENSION: Final = extension(PARQUET)
#: Locations listed per duplicated id; the count is always exact.
MAX_LOCATIONS: Final = 20


@dataclass(slots=True)
class _Part:
    obj: StoredObject
    number: int
    window: Window | None  # None for snapshot parts


@dataclass(frozen=True, slots=True)
class CheckedPart:
    """What reading one part found: its rows, its last sort key, its problems and its ids (each with
    its place, ``key:line``)."""

    rows: int
    last: tuple[str, ...] | None
    problems: tuple[Problem, ...]
    ids: tuple[tuple[str, str], ...]


#: Parts already read, by what decides what reading finds: (dataset, key, the body's BLAKE2b digest,
#: part limit, limits). For a caller that verifies the same bucket again and again (the simulator,
#: after every simulated day): a part with the same bytes is not parsed again, and adds the same
#: problems and ids; everything across parts (chains, duplicates, manifests, ledger) is checked anew.
PartMemo = dict[tuple[str, str, bytes, int, Limits], CheckedPart]


class _Checker:
    def __init__(
        self, report: VerifyReport, part_limit: int, limits: Limits = DEFAULT_LIMITS, memo: PartMemo | None = None
    ) -> None:
        self.report = report
        self.part_limit = part_limit
        self.limits = limits
        self.memo = memo
        self.rows_by_window: dict[tuple[str, Window], int] = {}
        #: Per event part: rows and hex MD5, for the manifests' counts (`verify.manifests`).
        self.part_rows: dict[str, int] = {}
        self.part_md5: dict[str, str] = {}
        self.on_part: Callable[[_Part], None] = lambda _part: None  # progress (issue 17)

    def problem(self, kind: str, dataset: str, key: str, detail: str, **extra: Any) -> None:
        self.report.problems.append(Problem(kind, dataset, key, detail, **extra))

    def check_numbering(self, dataset: str, label: str, parts: list[_Part], *, continued: bool = False) -> None:
        """Parts numbered 0000.. without holes; a ``continued`` window from its first part here on."""
        numbers = sorted(p.number for p in parts)
        first = numbers[0] if continued else 0
        missing = sorted(set(range(first, numbers[-1] + 1)) - set(numbers))
        if missing:
            names = ", ".join(f"{n:04d}" for n in missing)
            self.problem("missing_part", dataset, label, f"part(s) {names} missing of {first:04d}..{numbers[-1]:04d}")

    def check_rows(
        self,
        ds: Dataset,
        part: _Part,
        body: bytes | Exception,
        previous: tuple[str, ...] | None,
        seen: dict[str, list[str]],
    ) -> tuple[int, tuple[str, ...] | None]:
        """Check one part's content; returns (rows, last sort key).

        Order is checked inside the file, as the contract promises: rows that appeared late in a
        window arrive as additional parts, after parts whose rows sort later.
        """
        self.on_part(part)
        if self.memo is None or not isinstance(body, bytes):
            rows, last, found_ids = self._read_rows(ds, part, body)
        else:
            digest = hashlib.blake2b(body, digest_size=16).digest()
            memo_key = (ds.name, part.obj.key, digest, self.part_limit, self.limits)
            checked = self.memo.get(memo_key)
            if checked is None:
                before = len(self.report.problems)
                rows, last, found_ids = self._read_rows(ds, part, body)
                self.memo[memo_key] = CheckedPart(rows, last, tuple(self.report.problems[before:]), tuple(found_ids))
            else:
                self.report.problems.extend(checked.problems)
                rows, last, found_ids = checked.rows, checked.last, list(checked.ids)
        for row_id, place in found_ids:
            seen.setdefault(row_id, []).append(place)
        return rows, last

    def _read_rows(
        self, ds: Dataset, part: _Part, body: bytes | Exception
    ) -> tuple[int, tuple[str, ...] | None, list[tuple[str, str]]]:
        """`check_rows` of one part, reading it: (rows, last sort key, ids with their places)."""
        previous: tuple[str, ...] | None = None
        key = part.obj.key
        if isinstance(body, ObjectTooLarge):
            self.problem("too_large", ds.name, key, body.message)
            return 0, previous, []
        if isinstance(body, Exception):
            self.problem("unreadable", ds.name, key, f"cannot read: {_reason(body)}")
            return 0, previous, []
        lines: Iterable[Any]  # JSONL lines to decode, or Parquet rows already decoded
        if key.endswith(PARQUET_EXTENSION):
            # Footer first (rows, sizes, schema), then row group by row group (`verify.parquet_rows`).
            try:
                lines = parquet_rows(
                    ds,
                    body,
                    part_limit=self.part_limit,
                    max_bytes=self.limits.max_decompressed_bytes,
                    max_row_bytes=self.limits.max_line_bytes,
                )
            except ParquetProblem as exc:
                self.problem(exc.kind, ds.name, key, exc.detail)
                return 0, previous, []
            except ObjectTooLarge as exc:
                self.problem("too_large", ds.name, key, exc.message)
                return 0, previous, []
        else:
            # Streamed and bounded (`bounds.gzip_lines`); ids are kept aside until the whole part has read.
            lines = gzip_lines((body,), self.limits)
        found_ids: list[tuple[str, str]] = []
        window = part.window
        low = iso_ms(window.from_ms) if window else ""
        high = iso_ms(window.to_ms) if window else ""
        bad_schema: list[str] = []
        outside: list[str] = []
        disorder: list[str] = []
        decode = msgspec.json.Decoder().decode
        key_marks = [(name, f'"{name}":'.encode()) for name in ds.field_names]
        number = 0
        try:
            for number, line in enumerate(lines, 1):
                if number > self.part_limit:
                    break  # a bomb of empty lines must not be read to its end, nor cost an entry each
                try:
                    row: Any = decode(line) if isinstance(line, bytes) else line
                except msgspec.DecodeError as exc:
                    bad_schema.append(f"line {number}: not JSON ({exc})")
                    continue
                wrong = row_problem(ds, row) or (repeated_key(line, key_marks) if isinstance(line, bytes) else None)
                if wrong:
                    bad_schema.append(f"line {number}: {wrong}")
                    continue
                sort_key = tuple(str(row[name]) for name in ds.order_by)
                if previous is not None and sort_key < previous:
                    disorder.append(f"line {number}: {_show(ds, sort_key)} after {_show(ds, previous)}")
                previous = sort_key
                if window and not low < row["recorded_at"] <= high:
                    outside.append(f"line {number}: recorded_at {row['recorded_at']}")
                found_ids.append((row["id"], f"{key}:{number}"))
        except (zlib.error, EOFError) as exc:
            self.problem("corrupt_gzip", ds.name, key, f"not valid gzip: {exc}")
            return 0, None, []
        except ParquetProblem as exc:
            self.problem(exc.kind, ds.name, key, exc.detail)
            return 0, None, []
        except ObjectTooLarge as exc:
            self.problem("too_large", ds.name, key, f"{exc.message}; not read further (at line {number + 1:,})")
            return 0, None, []
        if number > self.part_limit:
            self.problem(
                "too_many_lines",
                ds.name,
                key,
                f"at least {number} lines; the limit is {self.part_limit} (not read further)",
            )
        for kind, found, what in (
            ("schema_mismatch", bad_schema, "row(s) do not match the published schema"),
            ("out_of_order", disorder, f"row(s) out of ({', '.join(ds.order_by)}) order"),
            ("row_outside_window", outside, f"row(s) outside the window ({low}, {high}]"),
        ):
            if found:
                self.problem(kind, ds.name, key, f"{len(found)} {what}; first at {found[0]}", count=len(found))
        return number, previous, found_ids

    def report_duplicates(self, dataset: str, seen: dict[str, list[str]]) -> None:
        for row_id, places in seen.items():
            if len(places) > 1:
                self.problem(
                    "duplicate_id",
                    dataset,
                    row_id,
                    f"id appears {len(places)} times",
                    count=len(places),
                    locations=tuple(places[:MAX_LOCATIONS]),
                )


def _reason(exc: Exception) -> str:
    # The bucket names its failures in our tree; anything else is shown by type only (its text may carry anything).
    return exc.message if isinstance(exc, ExportError) else type(exc).__name__


def _show(ds: Dataset, sort_key: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{n}={v}" for n, v in zip(ds.order_by, sort_key, strict=True)) + ")"


def _classify(
    checker: _Checker, objects: list[StoredObject]
) -> tuple[dict[str, dict[Window, list[_Part]]], dict[str, list[_Part]], dict[str, StoredObject]]:
    events: dict[str, dict[Window, list[_Part]]] = {}
    snapshot_parts: dict[str, list[_Part]] = {}
    successes: dict[str, StoredObject] = {}
    for obj in objects:
        parsed = parse_key(obj.key)
        dataset = obj.key.split("/", 1)[0]
        if parsed is None or parsed.dataset != dataset:
            checker.problem("unexpected_object", dataset, obj.key, "not a name Sequenzy writes in a dataset folder")
            continue
        if parsed.is_success:
            successes[parsed.date] = obj
        elif parsed.window is None:
            snapshot_parts.setdefault(parsed.date, []).append(_Part(obj, parsed.part or 0, None))
        else:
            if parsed.window.date_key != parsed.date:
                checker.problem(
                    "wrong_folder",
                    dataset,
                    obj.key,
                    f"window {parsed.window} belongs in date={parsed.window.date_key}",
                )
            events.setdefault(dataset, {}).setdefault(parsed.window, []).append(
                _Part(obj, parsed.part or 0, parsed.window)
            )
    return events, snapshot_parts, successes


def _check_chain(checker: _Checker, dataset: str, windows: list[Window]) -> None:
    previous: Window | None = None
    for w in windows:
        if previous is not None:
            if w.from_ms > previous.to_ms:
                checker.problem(
                    "gap",
                    dataset,
                    f"({iso_ms(previous.to_ms)}, {iso_ms(w.from_ms)}]",
                    f"no window covers ({previous.to_ms}, {w.from_ms}]: the chain jumps from {previous} to {w}",
                )
            elif w.from_ms < previous.to_ms:
                checker.problem(
                    "overlap",
                    dataset,
                    f"({iso_ms(w.from_ms)}, {iso_ms(min(w.to_ms, previous.to_ms))}]",
                    f"window {w} overlaps {previous}",
                )
        if previous is None or w.to_ms > previous.to_ms:
            previous = w


def continued_windows(by_window: dict[Window, list[_Part]]) -> set[Window]:
    """Windows that continue here what an earlier location holds: late rows of a window delivered
    before a destination change arrive at the current location as its next part numbers, so such a
    window has no part ``0000`` here and ends before this location's own chain begins (its first
    window with a part ``0000``). They are not part of this location's chain (no gap is reported
    before them) and are numbered without holes from their first part here on."""
    starts = [w.from_ms for w, parts in by_window.items() if any(p.number == 0 for p in parts)]
    chain_start = min(starts) if starts else None
    return {
        w
        for w, parts in by_window.items()
        if min(p.number for p in parts) > 0 and (chain_start is None or w.to_ms <= chain_start)
    }


def _check_events(
    checker: _Checker, bucket: Bucket, dataset: str, by_window: dict[Window, list[_Part]], workers: int
) -> None:
    ds = DATASETS[dataset]
    summary = checker.report.datasets[dataset]
    windows = sorted(by_window)
    continued = continued_windows(by_window)
    _check_chain(checker, dataset, [w for w in windows if w not in continued])
    ordered: list[_Part] = []
    for w in windows:
        parts = sorted(by_window[w], key=lambda p: p.number)
        checker.check_numbering(dataset, f"window {w.from_ms}-{w.to_ms} {w}", parts, continued=w in continued)
        ordered += parts
    seen: dict[str, list[str]] = {}
    previous: tuple[str, ...] | None = None
    current: Window | None = None
    bodies = prefetch(bucket, [p.obj for p in ordered], workers)
    for part, body in zip(ordered, bodies, strict=True):
        if part.window != current:
            current, previous = part.window, None
        rows, previous = checker.check_rows(ds, part, body, previous, seen)
        if isinstance(body, bytes):
            checker.part_rows[part.obj.key] = rows
            checker.part_md5[part.obj.key] = hashlib.md5(body, usedforsecurity=False).hexdigest()
        assert part.window is not None
        slot = (dataset, part.window)
        checker.rows_by_window[slot] = checker.rows_by_window.get(slot, 0) + rows
        summary.rows += rows
        summary.parts += 1
        summary.bytes += part.obj.size
    checker.report_duplicates(dataset, seen)
    summary.windows = len(windows)
    summary.continued = len(continued)
    summary.days = len({w.date_key for w in windows})
    if windows:
        summary.first, summary.last = iso_ms(windows[0].from_ms), iso_ms(max(w.to_ms for w in windows))


def _check_snapshots(
    checker: _Checker,
    bucket: Bucket,
    parts_by_day: dict[str, list[_Part]],
    successes: dict[str, StoredObject],
    workers: int,
) -> None:
    ds = DATASETS[SNAPSHOT_DATASET]
    summary = checker.report.datasets[SNAPSHOT_DATASET]
    days = sorted(set(parts_by_day) | set(successes))
    for earlier, later in zip(days, days[1:], strict=False):
        missing = (dt.date.fromisoformat(later) - dt.date.fromisoformat(earlier)).days - 1
        if missing > 0:
            checker.problem("gap", SNAPSHOT_DATASET, f"after date={earlier}", f"{missing} day(s) without a snapshot")
    for day in days:
        parts = sorted(parts_by_day.get(day, []), key=lambda p: p.number)
        label = f"date={day}"
        success = successes.get(day)
        if not parts:
            checker.problem("missing_part", SNAPSHOT_DATASET, label, "_SUCCESS without any part")
        else:
            checker.check_numbering(SNAPSHOT_DATASET, label, parts)
        if success is None:
            checker.problem(
                "missing_success",
                SNAPSHOT_DATASET,
                f"{SNAPSHOT_DATASET}/{label}/{SUCCESS_NAME}",
                "the snapshot is incomplete",
            )
        else:
            if success.size:
                checker.problem("success_not_empty", SNAPSHOT_DATASET, success.key, f"{success.size} bytes; must be 0")
            late = [p.obj.key for p in parts if p.obj.modified_ns > success.modified_ns]
            if late:
                checker.problem(
                    "success_not_last", SNAPSHOT_DATASET, success.key, f"written before {len(late)} part(s): {late[0]}"
                )
        seen: dict[str, list[str]] = {}
        previous: tuple[str, ...] | None = None
        for part, body in zip(parts, prefetch(bucket, [p.obj for p in parts], workers), strict=True):
            rows, previous = checker.check_rows(ds, part, body, previous, seen)
            summary.rows += rows
            summary.parts += 1
            summary.bytes += part.obj.size
            checker.rows_by_window[(SNAPSHOT_DATASET, _day_window(day))] = (
                checker.rows_by_window.get((SNAPSHOT_DATASET, _day_window(day)), 0) + rows
            )
        checker.report_duplicates(SNAPSHOT_DATASET, seen)
    summary.days = len(days)
    if days:
        summary.first, summary.last = days[0], days[-1]


def _day_window(day: str) -> Window:
    return Window.whole_day(dt.date.fromisoformat(day))


def verify_bucket(
    bucket: Bucket,
    *,
    ledger: tuple[ControlPlane, str] | None = None,
    part_limit: int = PART_LIMIT,
    workers: int = 8,
    progress: Advance = no_progress,
    until_ms: int | None = None,
    memo: PartMemo | None = None,
) -> VerifyReport:
    """``until_ms``: the time every event dataset's chain must reach (its window manifests prove it).
    ``memo``: parts read by earlier calls (`PartMemo`), filled in by this one."""
    report = VerifyReport(bucket.source)
    checker = _Checker(report, part_limit, bucket.limits, memo)
    progress("listing objects", 0, None)
    listed_all = sorted(bucket.list(), key=lambda o: o.key)
    # Delta logs (``<dataset>/_delta_log/``, issue 44) and table-only files (``<dataset>/_delta_rows/``)
    # are checked by `verify.table`, not as parts.
    objects = [o for o in listed_all if not is_table_object(o.key)]
    events, snapshot_parts, successes = _classify(checker, objects)
    _count_progress(checker, progress, events, snapshot_parts)
    for name in DATASETS:
        present = name in events or (name == SNAPSHOT_DATASET and (snapshot_parts or successes))
        if present:
            report.datasets[name] = DatasetSummary()
    for name, by_window in events.items():
        _check_events(checker, bucket, name, by_window, workers)
    if SNAPSHOT_DATASET in report.datasets:
        _check_snapshots(checker, bucket, snapshot_parts, successes, workers)
    listed = {name: {w: [p.obj for p in parts] for w, parts in by_window.items()} for name, by_window in events.items()}
    report.manifests, found = manifest_problems(
        bucket, listed, checker.part_rows, checker.part_md5, until_ms=until_ms, listed=len(objects), workers=workers
    )
    report.problems.extend(found)
    if len(objects) < len(listed_all):
        report.problems.extend(verify_tables(bucket, objects=listed_all, part_rows=checker.part_rows, ledger=ledger))
    if not objects:
        checker.problem("no_data", "-", report.source, f"no dataset folder ({', '.join(DATASETS)}) found")
    if ledger is not None:
        report.ledger_checked = True
        report.problems.extend(ledger_problems(checker.rows_by_window, *ledger, report.source))
    return report


def _count_progress(checker: _Checker, progress: Advance, events: Any, snapshot_parts: Any) -> None:
    """Objects and windows checked, reported as each part is read (issue 17)."""
    total_parts = sum(len(parts) for by_window in events.values() for parts in by_window.values())
    total_parts += sum(len(parts) for parts in snapshot_parts.values())
    total_windows = sum(len(by_window) for by_window in events.values()) + len(snapshot_parts)
    seen: set[object] = set()
    done = [0]

    def on_part(part: _Part) -> None:
        done[0] += 1
        seen.add((part.obj.key.split("/", 1)[0], part.window) if part.window else part.obj.key.rsplit("/", 1)[0])
        progress("objects checked", done[0], total_parts)
        progress("windows checked", len(seen), total_windows)

    checker.on_part = on_part


def verify_location(
    source: str,
    *,
    s3_endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
    ledger: tuple[ControlPlane, str] | None = None,
    part_limit: int = PART_LIMIT,
    progress: Advance = no_progress,
    limits: Limits = DEFAULT_LIMITS,
    until_ms: int | None = None,
) -> VerifyReport:
    """Verify a local folder or an ``s3://``/``gs://``/``az://`` prefix; see the module docstring for the checks
    and `verify.bounds` for what is read at most."""
    opener = open_azure_bucket if source.startswith("az://") else open_bucket
    bucket = opener(
        source,
        s3_endpoint=s3_endpoint,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region,
        limits=limits,
        on_listed=lambda n: progress("objects listed", n, None),
    )
    try:
        workers = 1 if isinstance(bucket, LocalBucket) else 8
        return verify_bucket(
            bucket, ledger=ledger, part_limit=part_limit, workers=workers, progress=progress, until_ms=until_ms
        )
    finally:
        bucket.close()


def repeated_key(line: bytes, marks: list[tuple[str, bytes]]) -> str | None:
    """``duplicate key <name>`` when the line's own object names a field twice (a JSON parser keeps one
    of the two silently: a value pasted into a line could replace a row's ``id``, issue 39).

    A field's ``"name":`` appearing twice anywhere in the line is rare (a nested value may hold the
    same key), so only such lines are parsed again, with Python's parser, which reports each object's
    keys; the line's own object is the last one it reports.
    """
    if not any(line.count(mark) > 1 for _, mark in marks):
        return None
    objects: list[list[str]] = []

    def keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        objects.append([k for k, _ in pairs])
        return {}

    try:
        json.loads(line, object_pairs_hook=keys)
    except ValueError:
        return None  # not JSON: reported as such by the caller's decode
    names = objects[-1] if objects else []
    twice = sorted({k for k in names if names.count(k) > 1})
    return f"duplicate key {', '.join(twice)}" if twice else None
