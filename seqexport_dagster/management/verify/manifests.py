"""Completeness from the bucket alone: the window manifests (`seqexport_dagster.delivery.manifest`) checked.

Without manifests, `verify` sees only the windows that are there: a gap between two windows shows,
but a missing first or last window, or a window that lost its last parts, does not. Each manifest
says which parts its window holds (key, rows, bytes, MD5) and where the dataset's chain starts, so
once a dataset has manifests:

- every part a window's newest manifest lists must exist, with its bytes, rows and MD5;
- every part in the dataset folder must be listed by its window's newest manifest (a part without
  one means the window is incomplete, or still being written);
- every window with parts must have a manifest;
- the first window must start where the chain starts (``chain_from_ms``): a first window missing
  altogether, parts and manifest, is found this way;
- with ``until_ms`` (``--until``), the chain must reach that time: a last window missing altogether.

Manifest keys are ``_sequenzy/manifests/<dataset>/date=.../<dataset>-<from>-<to>-through-NNNN.json``
below the prefix (`keys.manifest_key`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqexport_dagster.contract.keys import MANIFEST_FOLDER, MANIFEST_FORMAT, parse_manifest_key
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.destination.s3_errors import error_summary
from seqexport_dagster.errors import ExportError
from seqexport_dagster.management.verify.bucket import Bucket, LocalBucket, S3Bucket, StoredObject
from seqexport_dagster.management.verify.report import Problem


@dataclass(slots=True)
class _Manifest:
    key: str
    window: Window
    through: int
    chain_from_ms: int
    parts: list[dict[str, Any]] = field(default_factory=list)


def list_manifests(bucket: Bucket) -> list[StoredObject]:
    """Every manifest below the prefix (keys relative to it); none for a bucket kind we cannot list."""
    if isinstance(bucket, LocalBucket):
        folder = bucket.root / MANIFEST_FOLDER
        found = []
        for dirpath, _dirs, files in os.walk(folder):
            for file in files:
                path = Path(dirpath) / file
                stat = path.stat()
                found.append(StoredObject(path.relative_to(bucket.root).as_posix(), stat.st_size, stat.st_mtime_ns))
        return found
    if isinstance(bucket, S3Bucket):
        start = f"{bucket.prefix}/{MANIFEST_FOLDER}/" if bucket.prefix else f"{MANIFEST_FOLDER}/"
        strip = len(bucket.prefix) + 1 if bucket.prefix else 0
        out = []
        try:
            for page in bucket.client.get_paginator("list_objects_v2").paginate(Bucket=bucket.bucket, Prefix=start):
                for obj in page.get("Contents", []):
                    modified = int(obj["LastModified"].timestamp() * 1e9)
                    out.append(StoredObject(obj["Key"][strip:], int(obj["Size"]), modified))
        except Exception as exc:  # botocore's tree, named as the bucket's own listing names it
            raise ExportError(f"cannot list {bucket.source}/{MANIFEST_FOLDER}/: {error_summary(exc)}") from exc
        return out
    return []


def relative_part_key(full_key: str, dataset: str) -> str:
    """A manifest lists full object keys; the listing is relative to the prefix."""
    at = full_key.rfind(f"{dataset}/date=")
    return full_key[at:] if at >= 0 else full_key


def _read(bucket: Bucket, obj: StoredObject, problems: list[Problem]) -> _Manifest | None:
    parsed = parse_manifest_key(obj.key)
    if parsed is None:
        problems.append(Problem("bad_manifest", "-", obj.key, "not a manifest name Sequenzy writes"))
        return None
    dataset, window, through = parsed
    try:
        doc = json.loads(bucket.read(obj.key))
        ok = (
            doc.get("format") == MANIFEST_FORMAT
            and doc["dataset"] == dataset
            and (doc["window"]["from_ms"], doc["window"]["to_ms"]) == (window.from_ms, window.to_ms)
            and max(int(p["part"]) for p in doc["parts"]) == through
        )
    except Exception as exc:  # unreadable, not JSON, or missing fields: named, never raised
        problems.append(Problem("bad_manifest", dataset, obj.key, f"cannot read it: {type(exc).__name__}"))
        return None
    if not ok:
        problems.append(Problem("bad_manifest", dataset, obj.key, "its content does not match its name"))
        return None
    return _Manifest(obj.key, window, through, int(doc["chain_from_ms"]), list(doc["parts"]))


def manifest_problems(
    bucket: Bucket,
    parts_by_window: Mapping[str, Mapping[Window, list[StoredObject]]],
    part_rows: Mapping[str, int],
    part_md5: Mapping[str, str],
    *,
    until_ms: int | None = None,
) -> tuple[int, list[Problem]]:
    """(manifests read, problems). ``parts_by_window``: the listing's event parts per dataset and window."""
    problems: list[Problem] = []
    manifests: dict[str, dict[Window, _Manifest]] = {}
    count = 0
    for obj in sorted(list_manifests(bucket), key=lambda o: o.key):
        found = _read(bucket, obj, problems)
        if found is None:
            continue
        count += 1
        dataset = obj.key.split("/")[2]
        newest = manifests.setdefault(dataset, {}).get(found.window)
        if newest is None or found.through > newest.through:
            manifests[dataset][found.window] = found
    for dataset, by_window in manifests.items():
        problems += _dataset_problems(dataset, by_window, parts_by_window.get(dataset, {}), part_rows, part_md5)
        problems += _chain_ends(dataset, by_window, until_ms)
    if until_ms is not None:
        for dataset in parts_by_window:
            if dataset not in manifests:
                problems.append(Problem("no_manifest", dataset, dataset, "no window of this dataset has a manifest"))
    return count, problems


def _dataset_problems(
    dataset: str,
    by_window: dict[Window, _Manifest],
    listed: Mapping[Window, list[StoredObject]],
    part_rows: Mapping[str, int],
    part_md5: Mapping[str, str],
) -> list[Problem]:
    problems: list[Problem] = []
    for window in sorted(set(listed) - set(by_window)):
        problems.append(
            Problem(
                "no_manifest",
                dataset,
                f"window {window}",
                "parts without a manifest: incomplete or still being written",
            )
        )
    for window, manifest in sorted(by_window.items()):
        present = {o.key: o for o in listed.get(window, [])}
        named: set[str] = set()
        for entry in manifest.parts:
            key = relative_part_key(str(entry["key"]), dataset)
            named.add(key)
            obj = present.get(key)
            if obj is None:
                problems.append(
                    Problem("missing_part", dataset, key, f"listed by {manifest.key} but not in the bucket")
                )
                continue
            wrong = []
            if obj.size != entry["bytes"]:
                wrong.append(f"{obj.size} bytes, the manifest says {entry['bytes']}")
            if key in part_rows and part_rows[key] != entry["rows"]:
                wrong.append(f"{part_rows[key]} rows, the manifest says {entry['rows']}")
            if entry.get("md5") and key in part_md5 and part_md5[key] != entry["md5"]:
                wrong.append("its MD5 differs from the manifest's")
            if wrong:
                problems.append(Problem("manifest_mismatch", dataset, key, "; ".join(wrong)))
        for key in sorted(set(present) - named):
            problems.append(
                Problem("unlisted_part", dataset, key, f"not listed by the window's newest manifest {manifest.key}")
            )
    return problems


def _chain_ends(dataset: str, by_window: dict[Window, _Manifest], until_ms: int | None) -> list[Problem]:
    windows = sorted(by_window)
    first = windows[0]
    start = min(m.chain_from_ms for m in by_window.values())
    problems = []
    if first.from_ms > start:
        problems.append(
            Problem(
                "missing_window",
                dataset,
                f"({iso_ms(start)}, {iso_ms(first.from_ms)}]",
                f"the chain starts at {iso_ms(start)} but the first window with a manifest is {first}: "
                "the first window(s) are missing",
            )
        )
    last_ms = max(w.to_ms for w in windows)
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
