"""A check of a local export root against the bucket contract (DESIGN §3, §4), layered on `verify`.

``check_layout(root)`` reads a local export root (the folder that holds ``<dataset>/date=.../``)
and returns a list of problems; an empty list means the layout is what the customer docs promise.

The product's own `seqexport verify` is the oracle for everything a customer can check from the
objects (names and folders, the window chain, part numbering, gzip, line limit, schema, order, rows
inside their window, duplicate ids, ``_SUCCESS``); each of its problems comes back as one line,
``[kind] dataset: key: detail``. On top, this adds what only the exporter's own folder shows:

- nothing but dataset folders (and the exporter's ``_sequenzy``/``.seqexport-tmp``) at the root;
- every non-empty part ends its last line with a newline.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.management.verify import LocalBucket, verify_bucket

#: Folders the exporter may create at the root besides dataset folders.
ALLOWED_ROOT_EXTRAS = {"_sequenzy", ".seqexport-tmp"}


def check_layout(root: Path) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return [f"{root} is not a folder"]
    problems: list[str] = []
    for entry in sorted(root.iterdir()):
        if entry.name not in ALLOWED_ROOT_EXTRAS and entry.name not in DATASETS:
            problems.append(f"unexpected entry at the export root: {entry.name}")
    report = verify_bucket(LocalBucket(root), workers=1)
    problems += [f"[{p.kind}] {p.dataset}: {p.key}: {p.detail}" for p in report.problems]
    for name in DATASETS:
        for path in sorted(p for p in (root / name).rglob("*.jsonl.gz") if p.is_file()):
            problems += _unterminated(root, path)
    return problems


def _unterminated(root: Path, path: Path) -> list[str]:
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error):
        return []  # verify reports it (corrupt_gzip)
    if data and not data.endswith(b"\n"):
        return [f"{path.relative_to(root).as_posix()}: last line is not terminated by a newline"]
    return []
