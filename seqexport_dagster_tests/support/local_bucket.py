"""Reading back a bucket that is a local folder (the ``local`` provider tests export into)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqexport_dagster_tests.support.parts import part_rows


def bucket_rows(root: Path, dataset: str) -> list[dict[str, Any]]:
    """Every row of every part of ``dataset`` under ``root``, in part-path order."""
    rows: list[dict[str, Any]] = []
    paths = [p for p in (root / dataset).rglob("*") if p.name.endswith((".jsonl.gz", ".parquet"))]
    for path in sorted(paths):
        rows += part_rows(path.name, path.read_bytes())
    return rows
