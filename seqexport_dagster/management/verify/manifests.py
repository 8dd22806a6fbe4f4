"""Completeness from the bucket alone: the window manifests (`seqexport_dagster.delivery.manifest`) checked.

Without manifests, `verify` sees only the windows that are there: a gap between two windows shows,
but a missing first or last window, or a window that lost its last parts, does not. Each manifest
says which parts its window holds (key, rows, bytes, MD5) and where the dataset's chain starts, so
once a dataset has manifests:

- every part a window's newest manifest lists must exist, with its bytes, rows and MD5;
- every part in the dataset folder must be listed by its window's newest manifest (a part without
  one means the window is incomplete, or still being written);
- every window with parts must have a manifest;
- the first of the windows delivered at this place as its own must start where the chain starts
  (``chain_from_ms``): a first window missing altogether, parts and manifest, is found this way,
  whether or not late rows of an earlier place's windows landed here after a move (issue 47);
- with ``until_ms`` (``--until``), the chain must reach that time: a last window missing altogether.

Manifest keys are ``_sequenzy/manifests/<dataset>/date=.../<dataset>-<from>-<to>-through-NNNN.json``
below the prefix (`keys.manifest_key`).

Bounded (issue 41): manifests count against ``--max-objects`` with the parts (`Bucket.list_manifests`);
each is read only up to `MAX_MANIFEST_BYTES`; they are read in order, a window's newest one checked
against the listing as soon as its window's manifests are all read, and only a few numbers per
window are kept. A manifest that cannot be read, is not JSON, lacks a field or has one of the wrong
type is a ``bad_manifest`` problem naming the field, never an error of verify's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from seqexport_dagster.contract.keys import MANIFEST_FORMAT, MANIFEST_FORMAT_V1, parse_key, parse_manifest_key
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.errors import ExportError, ObjectTooLarge
from seqexport_dagster.management.verify.bounds import MIB
from seqexport_dagster.management.verify.bucket import Bucket, StoredObject, prefetch
from seqexport_dagster.management.verify.report import Problem

#: One manifest, at most: it lists one window's parts, about 250 bytes each (a window of 1,000
#: parts, 50 M rows, is 250 KB).
MAX_MANIFEST_BYTES: Final = MIB
#: Formats this verify reads (``/1``: before issue 47; see `delivery.manifest`).
FORMATS: Final = (MANIFEST_FORMAT_V1, MANIFEST_FORMAT)

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _PartEntry(msgspec.Struct):
    key: str
    part: _Count
    rows: _Count
    bytes: _Count
    md5: str | None = None


class _WindowEntry(msgspec.Struct):
    from_ms: int
    to_ms: int


class _Document(msgspec.Struct):
    """The fields verify reads; any other field is left alone (a later format may add some)."""

    format: str
    dataset: str
    window: _WindowEntry
    chain_from_ms: int
    parts: Annotated[list[_PartEntry], msgspec.Meta(min_length=1)]
    continues: bool | None = None  # from format /2


_decode = msgspec.json.Decoder(_Document).decode
#: Problems of one kind in one dataset listed one by one; past it they are counted in one entry.
#: A bucket may hold 200,000 manifests each naming thousands of parts that are not there.
MAX_LISTED: Final = 1_000


class _Problems:
    """The manifests' problems, aggregated past `MAX_LISTED` of a kind per dataset."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, problem: Problem) -> None:
        slot = (problem.kind, problem.dataset)
        self.counts[slot] = self.counts.get(slot, 0) + 1
        if self.counts[slot] <= MAX_LISTED:
            self.items.append(problem)

    def extend(self, problems: list[Problem]) -> None:
        for problem in problems:
            self.add(problem)

    def result(self) -> list[Problem]:
        more = [
            Problem(kind, dataset, "-", f"{n - MAX_LISTED:,} more like the above, not listed", count=n - MAX_LISTED)
            for (kind, dataset), n in self.counts.items()
            if n > MAX_LISTED
        ]
        return self.items + more


@dataclass(frozen=True, slots=True)
class _Newest:
    """What is kept of a window's newest manifest once its parts are checked."""

    key: str
    chain_from_ms: int
    continues: bool


def relative_part_key(full_key: str, dataset: str) -> str:
    """A manifest lists full object keys; the listing is relative to the prefix."""
    at = full_key.rfind(f"{dataset}/date=")
    return full_key[at:] if at >= 0 else full_key


def _read(key: str, dataset: str, window: Window, through: int, body: bytes | Exception) -> _Document | Problem:
    def bad(detail: str) -> Problem:
        return Problem("bad_manifest", dataset, key, detail)

    if isinstance(body, ObjectTooLarge):
        return bad(f"{body.message} (a manifest is at most {MAX_MANIFEST_BYTES:,} bytes)")
    if isinstance(body, ExportError):
        return bad(f"cannot read it: {body.message}")
    if isinstance(body, Exception):
        return bad(f"cannot read it: {type(body).__name__}")
    try:
        doc = _decode(body)
    except msgspec.ValidationError as exc:  # names the field: "Expected `int`, got `str` - at `$.chain_from_ms`"
        return bad(f"not a manifest: {str(exc)[:200]}")
    except msgspec.DecodeError:
        return bad("not JSON")
    if doc.format not in FORMATS:
        return bad(f"format {doc.format[:40]!r} is not one this verify reads ({', '.join(FORMATS)}): upgrade seqexport")
    if doc.dataset != dataset or (doc.window.from_ms, doc.window.to_ms) != (window.from_ms, window.to_ms):
        return bad("its content does not match its name")
    numbers = [p.part for p in doc.parts]
    if max(numbers) != through or len(set(numbers)) != len(numbers):
        return bad(f"its parts are not those its name says (through {through:04d}, each once)")
    return doc


def manifest_problems(
    bucket: Bucket,
    parts_by_window: Mapping[str, Mapping[Window, list[StoredObject]]],
    part_rows: Mapping[str, int],
    part_md5: Mapping[str, str],
    *,
    until_ms: int | None = None,
    listed: int = 0,
    workers: int = 1,
) -> tuple[int, list[Problem]]:
    """(manifests read, problems). ``parts_by_window``: the listing's event parts per dataset and
    window; ``listed``: how many objects the listing held (the manifests count on from there)."""
    problems = _Problems()
    named: list[tuple[tuple[str, Window, int], StoredObject]] = []
    for obj in bucket.list_manifests(listed):
        parsed = parse_manifest_key(obj.key)
        if parsed is None:
            problems.add(Problem("bad_manifest", "-", obj.key, "not a manifest name Sequenzy writes"))
        else:
            named.append((parsed, obj))
    named.sort(key=lambda item: item[0])  # by dataset, window, then through: a window's newest last
    newest: dict[str, dict[Window, _Newest]] = {}
    count = 0
    pending: tuple[str, Window, str, _Document] | None = None

    def settle() -> None:
        """The window's newest manifest, all of its manifests read: its parts against the listing."""
        if pending is None:
            return
        dataset, window, key, doc = pending
        listed_here = parts_by_window.get(dataset, {}).get(window, [])
        problems.extend(_parts_problems(dataset, key, doc.parts, listed_here, part_rows, part_md5))
        continues = bool(doc.continues) or min(p.part for p in doc.parts) > 0
        newest.setdefault(dataset, {})[window] = _Newest(key, doc.chain_from_ms, continues)

    bodies = prefetch(bucket, [obj for _, obj in named], workers, MAX_MANIFEST_BYTES)
    for ((dataset, window, through), obj), body in zip(named, bodies, strict=True):
        if pending is not None and (pending[0], pending[1]) != (dataset, window):
            settle()
            pending = None
        found = _read(obj.key, dataset, window, through, body)
        if isinstance(found, Problem):
            problems.add(found)
            continue
        count += 1
        pending = (dataset, window, obj.key, found)
    settle()
    for dataset, by_window in newest.items():
        listed_windows = parts_by_window.get(dataset, {})
        for window in sorted(set(listed_windows) - set(by_window)):
            problems.add(
                Problem(
                    "no_manifest",
                    dataset,
                    f"window {window}",
                    "parts without a manifest: incomplete or still being written",
                )
            )
        problems.extend(_chain_ends(dataset, by_window, listed_windows, until_ms))
    if until_ms is not None:
        for dataset in parts_by_window:
            if dataset not in newest:
                problems.add(Problem("no_manifest", dataset, dataset, "no window of this dataset has a manifest"))
    return count, problems.result()


def _parts_problems(
    dataset: str,
    manifest_key: str,
    entries: list[_PartEntry],
    listed: list[StoredObject],
    part_rows: Mapping[str, int],
    part_md5: Mapping[str, str],
) -> list[Problem]:
    problems: list[Problem] = []
    present = {o.key: o for o in listed}
    named: set[str] = set()
    for entry in entries:
        key = relative_part_key(entry.key, dataset)
        named.add(key)
        obj = present.get(key)
        if obj is None:
            problems.append(Problem("missing_part", dataset, key, f"listed by {manifest_key} but not in the bucket"))
            continue
        wrong = []
        if obj.size != entry.bytes:
            wrong.append(f"{obj.size} bytes, the manifest says {entry.bytes}")
        if key in part_rows and part_rows[key] != entry.rows:
            wrong.append(f"{part_rows[key]} rows, the manifest says {entry.rows}")
        if entry.md5 and key in part_md5 and part_md5[key] != entry.md5:
            wrong.append("its MD5 differs from the manifest's")
        if wrong:
            problems.append(Problem("manifest_mismatch", dataset, key, "; ".join(wrong)))
    for key in sorted(set(present) - named):
        problems.append(
            Problem("unlisted_part", dataset, key, f"not listed by the window's newest manifest {manifest_key}")
        )
    return problems


def _chain_ends(
    dataset: str,
    by_window: dict[Window, _Newest],
    listed: Mapping[Window, list[StoredObject]],
    until_ms: int | None,
) -> list[Problem]:
    """The first own window against the chain start, and (``until_ms``) the last window against it.

    Windows that continue an earlier place's window (late rows after a move: no part ``0000`` here)
    are not this place's chain. A start equal to such a window's start is left out: manifests of
    format ``/1`` took it for the chain's (issue 47), and no own window can begin there. So ``/1``
    manifests at a place that took late rows prove the first window only while one written before
    those late rows is there; ``/2`` ones always do."""
    continuing = {w for w, m in by_window.items() if m.continues}
    continuing |= {w for w, objs in listed.items() if objs and all(_part_number(o.key) != 0 for o in objs)}
    pulled_back = {w.from_ms for w in continuing}
    own = sorted(w for w, m in by_window.items() if not m.continues)
    starts = [m.chain_from_ms for w, m in by_window.items() if not m.continues and m.chain_from_ms not in pulled_back]
    problems = []
    if own and starts and own[0].from_ms > min(starts):
        start, first = min(starts), own[0]
        problems.append(
            Problem(
                "missing_window",
                dataset,
                f"({iso_ms(start)}, {iso_ms(first.from_ms)}]",
                f"the chain starts at {iso_ms(start)} but the first window with a manifest is {first}: "
                "the first window(s) are missing",
            )
        )
    last_ms = max(w.to_ms for w in by_window)
    if until_ms is not None and last_ms < until_ms:
        problems.append(
            Problem(
                "missing_window",
                dataset,
                f"({iso_ms(last_ms)}, {iso_ms(until_ms)}]",
                f"the last window with a manifest ends at {iso_ms(last_ms)}, before {iso_ms(until_ms)}: "
                "the last window(s) are missing",
            )
        )
    return problems


def _part_number(key: str) -> int | None:
    parsed = parse_key(key)
    return None if parsed is None else parsed.part
