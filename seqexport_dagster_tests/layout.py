"""A reusable check of an export's files against the bucket contract (DESIGN §3, §4).

``check_layout(root)`` reads a local export root (the folder that holds ``<dataset>/date=.../``)
and returns a list of problems; an empty list means the layout is what the customer docs promise:

- every file in a dataset folder is a name we write (`keys.parse_key`), in the right ``date=``
  folder, and nothing else is there;
- the windows of each event dataset form one chain, with no gap and no overlap;
- part numbers of each window (and each snapshot) run 0000.. without holes;
- every part is valid gzip of at most 50,000 JSON lines, each an object with exactly the contract's
  fields in order, inside its window, ordered by ``(recorded_at, id)`` (snapshots: by ``id``),
  inside each file (late rows come as additional parts of their window);
- no row id can be read twice within a dataset (stale parts must be blanked);
- ``_SUCCESS`` exists for each snapshot day, is empty, and was written no earlier than any part.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from seqexport_dagster.keys import SNAPSHOT_DATASET, SUCCESS_NAME, parse_key
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.window import Window, parse_iso_ms
from seqexport_dagster.writer import PART_LIMIT

#: Folders the exporter may create at the root besides dataset folders.
ALLOWED_ROOT_EXTRAS = {"_sequenzy", ".seqexport-tmp"}


@dataclass
class _Unit:
    """One window of an event dataset, or one day of the snapshot."""

    parts: dict[int, Path] = field(default_factory=dict)
    success: Path | None = None


def check_layout(root: Path) -> list[str]:
    root = Path(root)
    problems: list[str] = []
    if not root.is_dir():
        return [f"{root} is not a folder"]
    units: dict[str, dict[object, _Unit]] = defaultdict(dict)
    for entry in sorted(root.iterdir()):
        if entry.name in ALLOWED_ROOT_EXTRAS:
            continue
        if entry.name not in DATASETS:
            problems.append(f"unexpected entry at the export root: {entry.name}")
            continue
        for path in sorted(p for p in entry.rglob("*") if p.is_file()):
            relative = path.relative_to(root).as_posix()
            parsed = parse_key(relative)
            if parsed is None:
                problems.append(f"not a contract name: {relative}")
                continue
            if parsed.window is not None and parsed.window.date_key != parsed.date:
                problems.append(f"{relative}: date={parsed.date} but the window starts on {parsed.window.date_key}")
                continue
            unit_key: object = parsed.window if parsed.window is not None else parsed.date
            unit = units[parsed.dataset].setdefault(unit_key, _Unit())
            if parsed.is_success:
                unit.success = path
            else:
                assert parsed.part is not None
                unit.parts[parsed.part] = path
    for dataset, by_key in sorted(units.items()):
        seen_ids: dict[str, str] = {}
        if DATASETS[dataset].is_snapshot:
            for day, unit in sorted(by_key.items(), key=lambda kv: str(kv[0])):
                problems += _check_snapshot(root, str(day), unit)
        else:
            windows = sorted(w for w in by_key if isinstance(w, Window))
            for before, after in zip(windows, windows[1:], strict=False):
                if after.from_ms != before.to_ms:
                    kind = "gap" if after.from_ms > before.to_ms else "overlap"
                    problems.append(f"{dataset}: {kind} between window {before} and {after}")
            for window in windows:
                problems += _check_window(root, dataset, window, by_key[window], seen_ids)
    return problems


def _check_parts_numbering(label: str, unit: _Unit) -> list[str]:
    numbers = sorted(unit.parts)
    if not numbers:
        return [f"{label}: no parts"]
    if numbers != list(range(len(numbers))):
        return [f"{label}: part numbers {numbers} do not run from 0000 without holes"]
    return []


def _read_lines(root: Path, path: Path) -> tuple[list[dict[str, object]], list[str]]:
    relative = path.relative_to(root).as_posix()
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        return [], [f"{relative}: not valid gzip ({exc})"]
    if not data:
        return [], []
    problems: list[str] = []
    if not data.endswith(b"\n"):
        problems.append(f"{relative}: last line is not terminated by a newline")
    lines = data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")
    if len(lines) > PART_LIMIT:
        problems.append(f"{relative}: {len(lines)} lines, more than {PART_LIMIT}")
    rows: list[dict[str, object]] = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            problems.append(f"{relative}:{number}: not JSON")
            continue
        if not isinstance(row, dict):
            problems.append(f"{relative}:{number}: not a JSON object")
            continue
        rows.append(row)
    return rows, problems


def _check_fields(relative: str, dataset: str, rows: list[dict[str, object]]) -> list[str]:
    expected = list(DATASETS[dataset].field_names)
    for number, row in enumerate(rows, 1):
        if list(row) != expected:
            return [f"{relative}:{number}: fields {list(row)} are not the contract's {expected}"]
    return []


def _check_window(root: Path, dataset: str, window: Window, unit: _Unit, seen_ids: dict[str, str]) -> list[str]:
    label = f"{dataset} window {window}"
    problems = _check_parts_numbering(label, unit)
    if unit.success is not None:
        problems.append(f"{label}: _SUCCESS in an event folder")
    for number in sorted(unit.parts):
        # Ordered inside each file (the contract): late rows come as additional parts of a window.
        last: tuple[str, str] | None = None
        path = unit.parts[number]
        relative = path.relative_to(root).as_posix()
        rows, bad = _read_lines(root, path)
        problems += bad + _check_fields(relative, dataset, rows)
        for line, row in enumerate(rows, 1):
            recorded, row_id = str(row.get("recorded_at")), str(row.get("id"))
            try:
                recorded_ms = parse_iso_ms(recorded)
            except ValueError:
                problems.append(f"{relative}:{line}: recorded_at {recorded!r} is not a timestamp")
                continue
            if not window.contains(recorded_ms):
                problems.append(f"{relative}:{line}: recorded_at {recorded} is outside the window {window}")
            key = (recorded, row_id)
            if last is not None and key <= last:
                problems.append(f"{relative}:{line}: not ordered by (recorded_at, id) after {last}")
            last = key
            if row_id in seen_ids:
                problems.append(f"{relative}:{line}: id {row_id} already read in {seen_ids[row_id]}")
            seen_ids[row_id] = relative
    return problems


def _check_snapshot(root: Path, day: str, unit: _Unit) -> list[str]:
    label = f"{SNAPSHOT_DATASET} date={day}"
    problems = _check_parts_numbering(label, unit)
    seen: set[str] = set()
    for number in sorted(unit.parts):
        last: str | None = None  # ordered inside each file; a resumed snapshot appends late subscribers
        path = unit.parts[number]
        relative = path.relative_to(root).as_posix()
        rows, bad = _read_lines(root, path)
        problems += bad + _check_fields(relative, SNAPSHOT_DATASET, rows)
        for line, row in enumerate(rows, 1):
            row_id = str(row.get("id"))
            if last is not None and row_id <= last:
                problems.append(f"{relative}:{line}: not ordered by id after {last!r}")
            if row_id in seen:
                problems.append(f"{relative}:{line}: subscriber {row_id} appears twice in the snapshot")
            seen.add(row_id)
            last = row_id
    if unit.success is None:
        problems.append(f"{label}: no {SUCCESS_NAME}")
    else:
        if unit.success.stat().st_size != 0:
            problems.append(f"{label}: {SUCCESS_NAME} is not empty")
        success_ns = unit.success.stat().st_mtime_ns
        for path in unit.parts.values():
            if path.stat().st_mtime_ns > success_ns:
                problems.append(f"{label}: {path.name} was written after {SUCCESS_NAME}")
    return problems
