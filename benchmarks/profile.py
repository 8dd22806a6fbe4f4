"""Where the engine's CPU goes: py-spy samples of one engine run, native frames included.

py-spy (rather than pyinstrument) because most of the time is spent in C: SQLite, the sqlite3
module building row tuples, msgspec and isal. A Python-level profiler charges all of it to the
nearest Python frame (``Cursor.fetchmany``, ``PartWriter.parts``) and cannot separate the steps.

Only samples inside ``Runner.write_window`` count: process start and imports are not the engine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _join_lines() -> tuple[str, ...]:
    """py-spy names the line, and the join's memcpy has no symbol of its own: find the lines."""
    source = (ROOT / "seqexport_dagster" / "delivery" / "writer.py").read_text().splitlines()
    return tuple(f"writer.py:{n})" for n, line in enumerate(source, start=1) if 'b"".join(' in line)


#: (category, any of these in the stack), by priority: the first category that matches wins.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("garbage collector", ("gc_collect",)),
    # The engine's own work first: with a SQLite control plane, the ledger's frames include SQLite's.
    ("destination: writing each part (write, fsync, rename)", ("Destination.put",)),
    ("ledger: control-plane SQL per part and window", ("ControlPlane.",)),
    ("joining each part's gzip chunks into one body", _join_lines()),
    ("SQLite: running the query (B-tree walk, page reads)", ("sqlite3_step", "stmt_step")),
    ("sqlite3 module: row tuples (column access, UTF-8 decode)", ("_pysqlite_fetch_one_row", "pysqlite_cursor")),
    ("gzip: isal deflate level 1", ("(isal/", "isal_zlib")),
    ("JSON: msgspec encode_lines", ("encode_lines",)),
    ("rows to Structs (writer._row_builder)", ("_row_builder", "Struct_vectorcall")),
    # Left inside the writer's loop: bytecode and freeing the previous batch (the floor has both).
    ("the writer's loop itself (the interpreter, freeing each batch)", ("PartWriter.parts",)),
)
OTHER = "other engine code: keys, reports, commits"
#: Which categories the floor has too (benchmarks/child.py floor): the rest is the engine's own cost.
FLOOR_CATEGORIES = {name for name, _ in CATEGORIES[4:]}


def classify(frames: list[str]) -> str:
    for name, markers in CATEGORIES:
        if any(marker in frame for frame in frames for marker in markers):
            return name
    return OTHER


def shares(raw: Path, within: str = "Runner.write_window") -> tuple[Counter[str], int]:
    """Samples per category, from py-spy's ``raw`` (collapsed stacks) output."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if within not in stack or not n.isdigit():
            continue
        counts[classify(stack.split(";"))] += int(n)
        total += int(n)
    return counts, total


def profile_engine(params: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run one engine measurement under ``py-spy record --native``; return the breakdown."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        return {"error": "py-spy is not installed (pip install -e '.[bench]')"}
    raw = out.with_suffix(".raw.txt")
    proc = subprocess.run(
        [spy, "record", "--native", "--rate", "250", "--format", "raw", "--output", str(raw), "--",
         sys.executable, "-m", "benchmarks.child", "engine", json.dumps(params)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0 or not raw.exists():
        # Typically ptrace is not allowed (a container without CAP_SYS_PTRACE): say so, do not fail the run.
        return {"error": f"py-spy could not sample the engine: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"}
    # py-spy writes its own "py-spy> ..." lines to the same stdout as the child's JSON line.
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    counts, total = shares(raw)
    breakdown = [
        {"category": name, "samples": counts[name], "share": counts[name] / total if total else 0.0}
        for name in [*(c for c, _ in CATEGORIES), OTHER]
    ]
    out.write_text(json.dumps({"samples": total, "engine": result, "breakdown": breakdown}, indent=1))
    return {"samples": total, "engine": result, "breakdown": breakdown, "raw": str(raw)}
