"""A separate interpreter for peers whose versions must not touch the project's environment.

DuckDB's sqlite extension cannot be downloaded from DuckDB's site here; PyPI carries it only for
DuckDB 1.5.5 (``duckdb-extension-sqlite-scanner``), while the project pins DuckDB 2.0.1 for its
loading tests. The peer gets its own virtualenv, built once and cached beside the generated data, or
in ``$SEQEXPORT_BENCH_PEERS`` when set: the smoke test (test_benchmarks_smoke.py) generates its data
in a scratch folder but keeps the peers in the user's cache folder, since building both took about
11 CPU-s and a minute or two of pip on every run.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

DUCKDB_PEER = (
    "duckdb==1.5.5",
    "duckdb-extension-sqlite-scanner==1.5.5",
    "duckdb-extension-postgres-scanner==1.5.5",  # DuckDB reading PostgreSQL (benchmarks/compare.py)
)
#: APSW brings its own SQLite, which must never share a process with the engine's (reader.py).
APSW_PEER = ("apsw==3.54.1.0",)
#: Where the peer virtualenvs live instead of the data folder, when set.
PEERS_VARIABLE = "SEQEXPORT_BENCH_PEERS"


def peer_python(data_dir: Path, requirements: tuple[str, ...] = DUCKDB_PEER) -> Path:
    """The peer virtualenv's interpreter, creating the environment on first use. Creation holds a
    lock, so a benchmark and the smoke test sharing the folder never build one venv at once."""
    folder = Path(os.environ.get(PEERS_VARIABLE) or data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    venv = folder / ("peer-" + "-".join(r.replace("==", "-") for r in requirements[:1]))
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    with open(venv.with_name(venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == "\n".join(requirements) and python.exists():
            return python
        print(f"  installing the peer environment {venv.name} ({', '.join(requirements)}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"could not install {', '.join(requirements)}:\n{done.stderr[-2000:]}")
        stamp.write_text("\n".join(requirements))
        return python
