"""Reads a bucket back and checks it against the source and the control plane, layered on `verify`.

The checks are the delivery contract, asserted on what a customer's loader would actually read
(every object below the prefix, gunzipped), not on what the runner says it did. The product's own
`verify` is the oracle for everything the objects alone show (names and folders, the window chain,
part numbering, gzip, schema, order, rows inside their window, duplicate ids, ``_SUCCESS``); its
problems come back as ``verify [kind] ...`` lines. On top, this audit checks what needs the source
and the control plane:

* every source row up to the export's position is present (events: ``added_at < recorded_at <=
  position``; the snapshot: every subscriber of the account, once ``_SUCCESS`` exists), counted as
  expected / found / duplicated / missing / extra;
* the bucket's chain reaches from the dataset's start to its position;
* ``_SUCCESS`` exists only for a committed snapshot, and its last write came after the last write of
  every part of its folder (checked against the proxy's ordered request log when given);
* the position is never ahead of what was written: every part the ledger committed is in the bucket;
* the last error is cleared once the export has recovered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.file_format import FORMATS
from seqexport_dagster.contract.keys import parse_key, part_key
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.management.verify import Bucket, StoredObject, verify_bucket
from seqexport_dagster.store import COMMITTED, ControlPlane
from seqexport_dagster_tests.support.parts import part_rows


@dataclass
class DatasetAudit:
    dataset: str
    expected: int = 0
    found: int = 0  # distinct ids found
    duplicated: int = 0  # ids seen more than once
    missing: int = 0
    extra: int = 0  # ids in the bucket that the source no longer has (or never had)
    problems: list[str] = field(default_factory=list)


@dataclass
class AuditReport:
    export_id: str
    datasets: dict[str, DatasetAudit] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def expected(self) -> int:
        return sum(d.expected for d in self.datasets.values())

    @property
    def found(self) -> int:
        return sum(d.found for d in self.datasets.values())

    @property
    def duplicated(self) -> int:
        return sum(d.duplicated for d in self.datasets.values())

    @property
    def missing(self) -> int:
        return sum(d.missing for d in self.datasets.values())

    @property
    def extra(self) -> int:
        return sum(d.extra for d in self.datasets.values())

    def all_problems(self) -> list[str]:
        return self.problems + [f"{d.dataset}: {p}" for d in self.datasets.values() for p in d.problems]

    @property
    def clean(self) -> bool:
        return not self.all_problems() and not self.missing and not self.duplicated

    def assert_clean(self, *, allow_extra: bool = False) -> None:
        problems = self.all_problems()
        if self.missing:
            problems.append(f"{self.missing} rows missing")
        if self.duplicated:
            problems.append(f"{self.duplicated} ids duplicated")
        if self.extra and not allow_extra:
            problems.append(f"{self.extra} ids not in the source")
        assert not problems, f"bucket audit of {self.export_id} failed:\n  " + "\n  ".join(problems)


def read_objects(s3: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object below ``prefix`` (a plain admin client straight to moto, not through the proxy)."""
    return {obj.key: body for obj, body in _read_listing(s3, bucket, prefix)}


def _read_listing(s3: Any, bucket: str, prefix: str) -> list[tuple[StoredObject, bytes]]:
    out: list[tuple[StoredObject, bytes]] = []
    start = f"{prefix}/" if prefix else ""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            modified_ns = int(obj["LastModified"].timestamp() * 1e9)
            out.append((StoredObject(obj["Key"][len(start) :], int(obj["Size"]), modified_ns), body))
    return out


class _ReadBucket(Bucket):
    """What `verify` reads: the objects this audit already read (none of the exporter's ``_sequenzy/``)."""

    def __init__(self, source: str, listing: list[tuple[StoredObject, bytes]]) -> None:
        self.source = source
        self._listing = [(obj, body) for obj, body in listing if not obj.key.startswith("_sequenzy/")]
        self._bodies = {obj.key: body for obj, body in self._listing}

    def _pages(self) -> Iterator[list[StoredObject]]:
        yield [obj for obj, _ in self._listing]

    def read(self, key: str, limit: int | None = None) -> bytes:
        return self._bodies[key]


def source_ids(engine: sa.Engine, dataset: str, account_id: str, span: tuple[int, int] | None = None) -> set[str]:
    """Ids of the account's rows, optionally only those recorded in ``(from_ms, to_ms]`` (any length)."""
    sql = f"SELECT id FROM {dataset} WHERE account_id = :a"
    params: dict[str, Any] = {"a": account_id}
    if span is not None:
        sql += " AND recorded_at > :f AND recorded_at <= :t"
        params |= {"f": iso_ms(span[0]), "t": iso_ms(span[1])}
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.text(sql), params)}


def audit_export(
    store: ControlPlane,
    source: sa.Engine,
    s3: Any,
    export_id: str,
    *,
    put_order: list[str] | None = None,
    expect_recovered: bool = True,
) -> AuditReport:
    """Audit one export's bucket. ``put_order``: keys (relative to the bucket) in the order written."""
    export = store.get_export(export_id)
    config, _ = store.destination_config(export_id)
    listing = _read_listing(s3, config.bucket, config.prefix)
    objects = {obj.key: body for obj, body in listing}
    report = AuditReport(export_id)
    checked = verify_bucket(_ReadBucket(config.describe(), listing), workers=1)
    report.problems += [f"verify [{p.kind}] {p.dataset}: {p.key}: {p.detail}" for p in checked.problems]
    for state in export.datasets:
        ds = DatasetAudit(state.dataset)
        report.datasets[state.dataset] = ds
        if DATASETS[state.dataset].is_snapshot:
            _audit_snapshot(store, source, export.account_id, export_id, config.prefix, objects, put_order, ds)
        else:
            _audit_events(store, source, export.account_id, export_id, config.prefix, objects, state, ds)
        if expect_recovered and (state.last_error is not None or state.failures):
            ds.problems.append(f"last error still shown after recovery: {state.last_error!r} ({state.failures})")
    return report


def _audit_events(
    store: ControlPlane,
    source: sa.Engine,
    account_id: str,
    export_id: str,
    prefix: str,
    objects: dict[str, bytes],
    state: Any,
    ds: DatasetAudit,
) -> None:
    name = ds.dataset
    by_window: dict[Window, dict[int, list[dict[str, Any]]]] = {}
    for key, body in objects.items():
        parsed = parse_key(key)
        if parsed is None or parsed.dataset != name or parsed.window is None or parsed.part is None:
            continue
        by_window.setdefault(parsed.window, {})[parsed.part] = part_rows(key, body)
    ids: Counter[str] = Counter(row["id"] for parts in by_window.values() for rows in parts.values() for row in rows)
    # verify checks the chain has no gap or overlap; here, that it reaches from the start to the
    # position. Windows beyond the position (an attempt not yet committed) may exist.
    ordered = sorted(by_window)
    cursor = state.added_at
    for w in ordered:
        if w.from_ms == cursor and w.to_ms <= state.position_ms:
            cursor = w.to_ms
    if cursor < state.position_ms:
        ds.problems.append(
            f"gap: the bucket's chain stops at {iso_ms(cursor)}, position is {iso_ms(state.position_ms)}"
        )
    for lw in store.ledger(export_id, dataset=name):
        if lw.status == COMMITTED:
            for n in range(lw.parts):
                if all(part_key("", name, lw.window, n, fmt) not in objects for fmt in FORMATS):
                    ds.problems.append(f"committed part {n} of {lw.window} is not in the bucket")
    expected = (
        source_ids(source, name, account_id, (state.added_at, state.position_ms))
        if (state.position_ms > state.added_at)
        else set()
    )
    _count(ds, expected, ids)


def _audit_snapshot(
    store: ControlPlane,
    source: sa.Engine,
    account_id: str,
    export_id: str,
    prefix: str,
    objects: dict[str, bytes],
    put_order: list[str] | None,
    ds: DatasetAudit,
) -> None:
    days: dict[str, dict[int, list[dict[str, Any]]]] = {}
    success: set[str] = set()
    for key, body in objects.items():
        parsed = parse_key(key)
        if parsed is None or parsed.dataset != "subscribers":
            continue
        if parsed.is_success:
            success.add(parsed.date)
        elif parsed.part is not None:
            days.setdefault(parsed.date, {})[parsed.part] = part_rows(key, body)
    committed = {lw.window.date_key for lw in store.ledger(export_id, dataset="subscribers") if lw.status == COMMITTED}
    for day in sorted(success - committed):
        ds.problems.append(f"_SUCCESS for {day} but no committed snapshot")
    for day in sorted(committed - success):
        ds.problems.append(f"snapshot of {day} committed but _SUCCESS is missing")
    if put_order is not None:
        full = [k[len(prefix) + 1 :] if prefix else k for k in put_order]
        for day in success:
            folder = f"subscribers/date={day}/"
            last = {k: i for i, k in enumerate(full) if k.startswith(folder)}
            marker = last.get(folder + "_SUCCESS")
            late = [k for k, i in last.items() if marker is not None and i > marker]
            if late:
                ds.problems.append(f"parts written after _SUCCESS of {day}: {late}")
    expected: set[str] = set()
    ids: Counter[str] = Counter()
    everyone = source_ids(source, "subscribers", account_id)
    for day in sorted(success):
        parts = days.get(day, {})
        numbers = sorted(parts)
        day_ids: Counter[str] = Counter(row["id"] for n in numbers for row in parts[n])
        # Each day's snapshot is complete on its own: count it per day, keyed by day.
        for rid, n in day_ids.items():
            ids[f"{day}/{rid}"] += n
        expected |= {f"{day}/{rid}" for rid in everyone}
    _count(ds, expected, ids)


def _count(ds: DatasetAudit, expected: set[str], ids: Counter[str]) -> None:
    ds.expected = len(expected)
    ds.found = len(ids)
    ds.duplicated = sum(1 for n in ids.values() if n > 1)
    ds.missing = len(expected - set(ids))
    ds.extra = len(set(ids) - expected)
