"""The code of a git revision, unpacked to a folder, for benchmarks that run two revisions side by side."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_revision(rev: str, into: Path, paths: tuple[str, ...] = ("seqexport_dagster",)) -> Path:
    """``paths`` of ``rev`` (``git archive``) unpacked under ``into``, created if missing."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, *paths], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into
