"""Reading back a bucket that is a local folder (the ``local`` provider tests export into)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def bucket_rows(root: Path, dataset: str) -> list[dict[str, Any]]:
    """Every row of every part of ``dataset`` under ``root``, in part-path order."""
    rows: list[dict[str, Any]] = []
    for path in sorted((root / dataset).rglob("*.jsonl.gz")):
        rows += [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
    return rows
