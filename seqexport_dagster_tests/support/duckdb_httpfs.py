"""DuckDB with its ``httpfs`` extension, in a process of its own, for the docs' ``s3://`` statements.

The extension ships on PyPI only as ``duckdb-extension-httpfs``, built for one DuckDB release (1.5.5) and
pinned to it, while the test suite runs DuckDB 2.0 (which fakesnow needs; a 1.5 extension crashes a 2.0
process when loaded). So `make` installs that DuckDB and its extension into a folder of their own,
``.venv/duckdb-httpfs`` (``seqexport_dagster_tests/support/duckdb_httpfs.txt``), and the statements run
there, in a subprocess, with no network: ``LOAD`` of the packaged file replaces ``INSTALL httpfs``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Where `make` installs it (``pip install --target``); SEQEXPORT_DUCKDB_HTTPFS overrides for a checkout
#: whose virtualenv is elsewhere.
FOLDER = Path(os.environ.get("SEQEXPORT_DUCKDB_HTTPFS", Path(sys.prefix) / "duckdb-httpfs"))

_SCRIPT = r"""
import json, pathlib, sys
import duckdb
job = json.load(sys.stdin)
con = duckdb.connect()
for name in job["extensions"]:
    extension = next(pathlib.Path(job["folder"]).glob(f"duckdb_extension_{name}/extensions/*/{name}.duckdb_extension"))
    con.execute(f"LOAD '{extension}'")
out = {"version": duckdb.__version__, "results": []}
for sql in job["setup"]:
    con.execute(sql)
for sql in job["queries"]:
    out["results"].append([list(map(str, row)) for row in con.execute(sql).fetchall()])
json.dump(out, sys.stdout)
"""


def run(
    setup: list[str], queries: list[str], *, timeout_s: float = 120, extensions: tuple[str, ...] = ("httpfs",)
) -> dict[str, Any]:
    """Run ``setup`` statements, then ``queries``; each query's rows come back with values as text.
    ``extensions``: the packaged extensions loaded first (``azure`` for the Azure Blob statements,
    ``delta`` for a Delta table, issue 44)."""
    if not (FOLDER / "duckdb").is_dir():
        raise RuntimeError(
            f"DuckDB with httpfs is not installed in {FOLDER}: run `make test` (or "
            f"pip install --target {FOLDER} -r seqexport_dagster_tests/support/duckdb_httpfs.txt)"
        )
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(FOLDER)
    job = json.dumps({"folder": str(FOLDER), "setup": setup, "queries": queries, "extensions": list(extensions)})
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], input=job, capture_output=True, text=True, env=env, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(f"DuckDB with httpfs failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result
