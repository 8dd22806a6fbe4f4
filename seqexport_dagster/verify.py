"""`seqexport verify`: the customer's proof that a bucket holds everything, exactly once.

Runs on the customer's side with their own read key (List and Get are fine here; the exporter itself
only ever PUTs). It re-derives every guarantee of the bucket contract from the objects alone:

- windows of each event dataset chain without a gap or an overlap, and sit in their day's folder;
- parts of a window or a snapshot are numbered 0000.. without holes;
- each part is valid gzip with at most 50,000 lines of JSON, each row of the published schema
  (every field, in order, with the right type);
- rows are ordered by ``(recorded_at, id)`` (snapshots: by ``id``) and inside their window;
- no id appears twice (events: per dataset; snapshots: per day), with every place it appears;
- each snapshot day has an empty ``_SUCCESS`` written no earlier than any of its parts.

Optionally the rows of every window are compared with the control-plane ledger (operators only).
Problems are aggregated per object (one "3 rows outside the window" rather than three entries) so a
badly broken bucket still gives a readable report.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from seqexport_dagster.errors import ExportError, InvalidInput
from seqexport_dagster.progress import Advance, no_progress
from seqexport_dagster.schema import DATASETS, TIMESTAMP_PATTERN, Dataset, Field
from seqexport_dagster.window import PART_LIMIT, SUCCESS_NAME, Window, iso_ms, parse_key

if TYPE_CHECKING:
    from seqexport_dagster.store import ControlPlane

#: Locations listed per duplicated id; the count is always exact.
MAX_LOCATIONS: Final = 20
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the bucket. ``key`` is the object (or id) it is about."""

    kind: str
    dataset: str
    key: str
    detail: str
    count: int = 1
    locations: tuple[str, ...] = ()


@dataclass(slots=True)
class DatasetSummary:
    windows: int = 0
    days: int = 0
    parts: int = 0
    rows: int = 0
    bytes: int = 0
    first: str | None = None
    last: str | None = None


@dataclass(slots=True)
class VerifyReport:
    source: str
    datasets: dict[str, DatasetSummary] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    ledger_checked: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "ledger_checked": self.ledger_checked,
            "datasets": {name: asdict(s) for name, s in self.datasets.items()},
            "problems": [{**asdict(p), "locations": list(p.locations)} for p in self.problems],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def render(self, max_problems: int = 200) -> str:
        lines = [f"verify {self.source}"]
        for name, s in self.datasets.items():
            span = f" {s.first} .. {s.last}" if s.first else ""
            unit = _plural(s.days, "day") if DATASETS[name].is_snapshot else _plural(s.windows, "window")
            counts = f"{_plural(s.parts, 'part')}, {_plural(s.rows, 'row')}, {s.bytes:,} bytes"
            lines.append(f"  {name:<14} {unit}, {counts}{span}")
        if self.ledger_checked:
            lines.append("  rows per window compared with the control-plane ledger")
        if self.ok:
            lines.append("OK: no problems found")
            return "\n".join(lines)
        lines.append(f"FAILED: {len(self.problems)} problem(s)")
        for p in self.problems[:max_problems]:
            lines.append(f"  [{p.kind}] {p.dataset}: {p.key}: {p.detail}")
            lines.extend(f"      at {loc}" for loc in p.locations)
        if len(self.problems) > max_problems:
            lines.append(f"  ... and {len(self.problems) - max_problems} more (use --json for all)")
        return "\n".join(lines)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str  # relative to the verified prefix
    size: int
    modified_ns: int


class Bucket:
    """What verify needs from a location: list once, read each object."""

    source: str

    def list(self) -> list[StoredObject]:
        raise NotImplementedError

    def read(self, key: str) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        return None


class LocalBucket(Bucket):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.source = str(root)

    def list(self) -> list[StoredObject]:
        if not self.root.is_dir():
            raise InvalidInput("source", f"{self.root} is not a folder")
        found = []
        for name in DATASETS:
            folder = self.root / name
            if not folder.is_dir():
                continue
            for dirpath, _dirs, files in os.walk(folder):
                for file in files:
                    path = Path(dirpath) / file
                    stat = path.stat()
                    found.append(StoredObject(path.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns))
        return found

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()


class S3Bucket(Bucket):
    """An S3 or S3-compatible prefix (GCS through HMAC keys with ``gs://``)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        scheme: str,
        endpoint: str | None,
        access_key_id: str | None,
        secret_access_key: str | None,
        region: str | None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if scheme == "gs" and not endpoint:
            endpoint = "https://storage.googleapis.com"
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.source = f"{scheme}://{bucket}/{self.prefix}".rstrip("/")
        # The customer's own tool: their default credential chain is fine when no key is given.
        session = boto3.session.Session(
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            region_name=region or ("auto" if scheme == "gs" else "us-east-1"),
        )
        style: Literal["path", "auto"] = "path" if endpoint else "auto"
        self.client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": style},
                retries={"mode": "standard", "max_attempts": 5},
                max_pool_connections=16,
            ),
        )

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def list(self) -> list[StoredObject]:
        found = []
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            for name in DATASETS:
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=self._full(name + "/")
                )
                for page in pages:
                    for obj in page.get("Contents", []):
                        modified = obj["LastModified"].timestamp()
                        found.append(StoredObject(obj["Key"][strip:], int(obj["Size"]), int(modified * 1e9)))
        except Exception as exc:  # botocore's tree; translated at this one boundary
            raise ExportError(f"cannot list {self.source}: {_client_error(exc)}") from exc
        return found

    def read(self, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        return body

    def close(self) -> None:
        self.client.close()


def _client_error(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".rstrip(": ")
    return type(exc).__name__


def open_bucket(
    source: str,
    *,
    s3_endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
) -> Bucket:
    """``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///path`` or a plain folder path."""
    match = re.match(r"^(s3|gs)://([^/]+)/?(.*)$", source)
    if match:
        return S3Bucket(
            match.group(2),
            match.group(3),
            scheme=match.group(1),
            endpoint=s3_endpoint,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            region=region,
        )
    if "://" in source and not source.startswith("file://"):
        raise InvalidInput("source", f"{source!r}: use s3://bucket/prefix, gs://bucket/prefix or a local folder")
    return LocalBucket(Path(source.removeprefix("file://")).expanduser().resolve())


@dataclass(slots=True)
class _Part:
    obj: StoredObject
    number: int
    window: Window | None  # None for snapshot parts


class _Checker:
    def __init__(self, report: VerifyReport, part_limit: int) -> None:
        self.report = report
        self.part_limit = part_limit
        self.rows_by_window: dict[tuple[str, Window], int] = {}
        self.on_part: Callable[[_Part], None] = lambda _part: None  # progress (issue 17)

    def problem(self, kind: str, dataset: str, key: str, detail: str, **extra: Any) -> None:
        self.report.problems.append(Problem(kind, dataset, key, detail, **extra))

    def check_numbering(self, dataset: str, label: str, parts: list[_Part]) -> None:
        numbers = sorted(p.number for p in parts)
        missing = sorted(set(range(numbers[-1] + 1)) - set(numbers))
        if missing:
            names = ", ".join(f"{n:04d}" for n in missing)
            self.problem("missing_part", dataset, label, f"part(s) {names} missing of 0000..{numbers[-1]:04d}")

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
        previous = None
        key = part.obj.key
        self.on_part(part)
        if isinstance(body, Exception):
            self.problem("unreadable", ds.name, key, f"cannot read: {_client_error(body)}")
            return 0, previous
        try:
            text = _gunzip(body)
        except (zlib.error, EOFError) as exc:
            self.problem("corrupt_gzip", ds.name, key, f"not valid gzip: {exc}")
            return 0, previous
        lines = text.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if len(lines) > self.part_limit:
            self.problem("too_many_lines", ds.name, key, f"{len(lines)} lines; the limit is {self.part_limit}")
        window = part.window
        low = iso_ms(window.from_ms) if window else ""
        high = iso_ms(window.to_ms) if window else ""
        bad_schema: list[str] = []
        outside: list[str] = []
        disorder: list[str] = []
        decode = msgspec.json.Decoder().decode
        for number, line in enumerate(lines, 1):
            try:
                row = decode(line)
            except msgspec.DecodeError as exc:
                bad_schema.append(f"line {number}: not JSON ({exc})")
                continue
            wrong = row_problem(ds, row)
            if wrong:
                bad_schema.append(f"line {number}: {wrong}")
                continue
            sort_key = tuple(str(row[name]) for name in ds.order_by)
            if previous is not None and sort_key < previous:
                disorder.append(f"line {number}: {_show(ds, sort_key)} after {_show(ds, previous)}")
            previous = sort_key
            if window and not low < row["recorded_at"] <= high:
                outside.append(f"line {number}: recorded_at {row['recorded_at']}")
            seen.setdefault(row["id"], []).append(f"{key}:{number}")
        for kind, found, what in (
            ("schema_mismatch", bad_schema, "row(s) do not match the published schema"),
            ("out_of_order", disorder, f"row(s) out of ({', '.join(ds.order_by)}) order"),
            ("row_outside_window", outside, f"row(s) outside the window ({low}, {high}]"),
        ):
            if found:
                self.problem(kind, ds.name, key, f"{len(found)} {what}; first at {found[0]}", count=len(found))
        return len(lines), previous

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


def _show(ds: Dataset, sort_key: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{n}={v}" for n, v in zip(ds.order_by, sort_key, strict=True)) + ")"


def _gunzip(body: bytes) -> bytes:
    """Every gzip member, as any gzip reader would; raises on truncation or trailing junk."""
    out = []
    data = body
    while data:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data))
        if not d.eof:
            raise EOFError("truncated gzip stream")
        data = d.unused_data
    return b"".join(out)


_PY_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "timestamp": (str,),
    "integer": (int,),
    "object": (dict,),
    "array": (list,),
}


def row_problem(ds: Dataset, row: Any) -> str | None:
    """Why a decoded row breaks the published schema (field set, order, types), or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    names = tuple(row)
    if names != ds.field_names:
        missing = [n for n in ds.field_names if n not in row]
        extra = [n for n in names if n not in ds.field_names]
        if missing or extra:
            return f"fields differ: missing {missing or 'none'}, unexpected {extra or 'none'}"
        return "fields are not in the published order"
    for f in ds.fields:
        wrong = _field_problem(f, row[f.name])
        if wrong:
            return f"{f.name}: {wrong}"
    return None


def _field_problem(f: Field, value: Any) -> str | None:
    if value is None:
        return None if f.nullable else "null where a value is required"
    if isinstance(value, bool) or not isinstance(value, _PY_TYPES[f.type]):
        return f"expected {f.type}, got {type(value).__name__}"
    if f.type == "timestamp" and not _TIMESTAMP.match(str(value)):
        return f"{value!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        return "expected an array of strings"
    if f.enum and value not in f.enum:
        return f"{value!r} is not one of {', '.join(f.enum)}"
    if f.max_length is not None and isinstance(value, str) and len(value) > f.max_length:
        return f"longer than {f.max_length} characters"
    return None


def _prefetch(bucket: Bucket, objects: list[StoredObject], workers: int) -> Iterator[bytes | Exception]:
    """Read objects in order with a few reads in flight; memory stays at ``workers`` parts."""

    def read(key: str) -> bytes | Exception:
        try:
            return bucket.read(key)
        except Exception as exc:  # reported per object; one unreadable part must not stop verify
            return exc

    if workers <= 1:
        for obj in objects:
            yield read(obj.key)
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: list[Future[bytes | Exception]] = []
        for obj in objects:
            pending.append(pool.submit(read, obj.key))
            if len(pending) >= workers:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()


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


def _check_events(
    checker: _Checker, bucket: Bucket, dataset: str, by_window: dict[Window, list[_Part]], workers: int
) -> None:
    ds = DATASETS[dataset]
    summary = checker.report.datasets[dataset]
    windows = sorted(by_window)
    _check_chain(checker, dataset, windows)
    ordered: list[_Part] = []
    for w in windows:
        parts = sorted(by_window[w], key=lambda p: p.number)
        checker.check_numbering(dataset, f"window {w.from_ms}-{w.to_ms} {w}", parts)
        ordered += parts
    seen: dict[str, list[str]] = {}
    previous: tuple[str, ...] | None = None
    current: Window | None = None
    bodies = _prefetch(bucket, [p.obj for p in ordered], workers)
    for part, body in zip(ordered, bodies, strict=True):
        if part.window != current:
            current, previous = part.window, None
        rows, previous = checker.check_rows(ds, part, body, previous, seen)
        assert part.window is not None
        slot = (dataset, part.window)
        checker.rows_by_window[slot] = checker.rows_by_window.get(slot, 0) + rows
        summary.rows += rows
        summary.parts += 1
        summary.bytes += part.obj.size
    checker.report_duplicates(dataset, seen)
    summary.windows = len(windows)
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
    ds = DATASETS["subscribers"]
    summary = checker.report.datasets["subscribers"]
    days = sorted(set(parts_by_day) | set(successes))
    for earlier, later in zip(days, days[1:], strict=False):
        missing = (dt.date.fromisoformat(later) - dt.date.fromisoformat(earlier)).days - 1
        if missing > 0:
            checker.problem("gap", "subscribers", f"after date={earlier}", f"{missing} day(s) without a snapshot")
    for day in days:
        parts = sorted(parts_by_day.get(day, []), key=lambda p: p.number)
        label = f"date={day}"
        success = successes.get(day)
        if not parts:
            checker.problem("missing_part", "subscribers", label, "_SUCCESS without any part")
        else:
            checker.check_numbering("subscribers", label, parts)
        if success is None:
            checker.problem(
                "missing_success", "subscribers", f"subscribers/{label}/{SUCCESS_NAME}", "the snapshot is incomplete"
            )
        else:
            if success.size:
                checker.problem("success_not_empty", "subscribers", success.key, f"{success.size} bytes; must be 0")
            late = [p.obj.key for p in parts if p.obj.modified_ns > success.modified_ns]
            if late:
                checker.problem(
                    "success_not_last", "subscribers", success.key, f"written before {len(late)} part(s): {late[0]}"
                )
        seen: dict[str, list[str]] = {}
        previous: tuple[str, ...] | None = None
        for part, body in zip(parts, _prefetch(bucket, [p.obj for p in parts], workers), strict=True):
            rows, previous = checker.check_rows(ds, part, body, previous, seen)
            summary.rows += rows
            summary.parts += 1
            summary.bytes += part.obj.size
            checker.rows_by_window[("subscribers", _day_window(day))] = (
                checker.rows_by_window.get(("subscribers", _day_window(day)), 0) + rows
            )
        checker.report_duplicates("subscribers", seen)
    summary.days = len(days)
    if days:
        summary.first, summary.last = days[0], days[-1]


def _day_window(day: str) -> Window:
    return Window.whole_day(dt.date.fromisoformat(day))


def _check_ledger(checker: _Checker, store: ControlPlane, export_id: str) -> None:
    """Rows per window in the bucket against the latest committed attempt in the ledger.

    Only windows from the start of the bucket's chain on are compared: after a destination change
    the earlier windows live in the old location.
    """
    from seqexport_dagster.store import COMMITTED

    checker.report.ledger_checked = True
    latest: dict[tuple[str, Window], int] = {}
    for entry in store.ledger(export_id):
        if entry.status == COMMITTED:
            latest[(entry.dataset, entry.window)] = entry.rows
    starts: dict[str, int] = {}
    for dataset, window in checker.rows_by_window:
        starts[dataset] = min(starts.get(dataset, window.from_ms), window.from_ms)
    from seqexport_dagster.ledger_scope import committed_elsewhere

    elsewhere = committed_elsewhere(store, export_id, checker.report.source)
    for (dataset, window), rows in sorted(latest.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if dataset not in starts or window.from_ms < starts[dataset] or (dataset, window) in elsewhere:
            continue
        found = checker.rows_by_window.get((dataset, window))
        if found is None:
            checker.problem("ledger_window_missing", dataset, str(window), f"committed with {rows} rows, not in bucket")
        elif found != rows:
            checker.problem("ledger_rows_mismatch", dataset, str(window), f"bucket has {found} rows, ledger {rows}")
    for (dataset, window), rows in sorted(checker.rows_by_window.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if (dataset, window) not in latest:
            checker.problem("not_in_ledger", dataset, str(window), f"{rows} rows in the bucket, no committed window")


def verify_bucket(
    bucket: Bucket,
    *,
    ledger: tuple[ControlPlane, str] | None = None,
    part_limit: int = PART_LIMIT,
    workers: int = 8,
    progress: Advance = no_progress,
) -> VerifyReport:
    report = VerifyReport(bucket.source)
    checker = _Checker(report, part_limit)
    progress("listing objects", 0, None)
    objects = sorted(bucket.list(), key=lambda o: o.key)
    events, snapshot_parts, successes = _classify(checker, objects)
    _count_progress(checker, progress, events, snapshot_parts)
    for name in DATASETS:
        present = name in events or (name == "subscribers" and (snapshot_parts or successes))
        if present:
            report.datasets[name] = DatasetSummary()
    for name, by_window in events.items():
        _check_events(checker, bucket, name, by_window, workers)
    if "subscribers" in report.datasets:
        _check_snapshots(checker, bucket, snapshot_parts, successes, workers)
    if not objects:
        checker.problem("no_data", "-", report.source, f"no dataset folder ({', '.join(DATASETS)}) found")
    if ledger is not None:
        _check_ledger(checker, *ledger)
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
) -> VerifyReport:
    """Verify a local folder or an ``s3://``/``gs://`` prefix; see the module docstring for the checks."""
    bucket = open_bucket(
        source,
        s3_endpoint=s3_endpoint,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region,
    )
    try:
        workers = 1 if isinstance(bucket, LocalBucket) else 8
        return verify_bucket(bucket, ledger=ledger, part_limit=part_limit, workers=workers, progress=progress)
    finally:
        bucket.close()
