"""DuckDB exporting the same rows straight from the SQLite file (or PostgreSQL, ``pg_dsn``), as a user would:
``ATTACH 'source.db' (TYPE sqlite)`` then ``COPY (SELECT ...) TO 'x.jsonl.gz' (FORMAT JSON, COMPRESSION GZIP)``
(or ``(FORMAT PARQUET, COMPRESSION ZSTD)`` with ``"format": "parquet"``).

Runs under the peer interpreter of `benchmarks/peers.py` (DuckDB 1.5.5 and its sqlite extension from
PyPI: the extension cannot be downloaded from DuckDB's site here), so it imports nothing of ours.
``python -m benchmarks.duckdb_sqlite 'JSON params'`` (from the repository root) prints one JSON line like `benchmarks/child.py`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from benchmarks.procinfo import peak_rss_mb


def _extension(module: str, name: str) -> str:
    package = __import__(module)
    return str(Path(package.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension")


def main(params: dict[str, object]) -> dict[str, object]:
    db = duckdb.connect()
    db.execute(f"SET threads = {int(str(params.get('threads', 1)))}")
    if params.get("pg_dsn"):  # PostgreSQL through DuckDB's postgres extension (binary COPY)
        db.execute(f"LOAD '{_extension('duckdb_extension_postgres_scanner', 'postgres_scanner')}'")
        db.execute(f"ATTACH '{params['pg_dsn']}' AS src (TYPE postgres, READ_ONLY)")
    else:
        db.execute(f"LOAD '{_extension('duckdb_extension_sqlite_scanner', 'sqlite_scanner')}'")
        db.execute(f"ATTACH '{params['source_path']}' AS src (TYPE sqlite, READ_ONLY)")
    columns = ", ".join(str(c) for c in params["columns"])  # type: ignore[attr-defined]
    where = "account_id = ? AND recorded_at > ? AND recorded_at <= ?"
    with tempfile.TemporaryDirectory(dir=str(params.get("tmp") or "") or None) as tmp:
        parquet = params.get("format") == "parquet"
        out = Path(tmp) / ("email_events.parquet" if parquet else "email_events.jsonl.gz")
        options = "FORMAT PARQUET, COMPRESSION ZSTD" if parquet else "FORMAT JSON, COMPRESSION GZIP"
        cpu, wall = time.process_time(), time.perf_counter()
        found = db.execute(
            f"COPY (SELECT {columns} FROM src.email_events WHERE {where} ORDER BY recorded_at, id) "
            f"TO '{out}' ({options})",
            [params["account"], params["from"], params["to"]],
        ).fetchone()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        size = out.stat().st_size
    return {
        "task": "duckdb_sqlite",
        "wall": wall,
        "cpu": cpu,
        "rows": int(found[0]) if found else 0,
        "bytes": size,
        "peak_rss_mb": peak_rss_mb(),
        "duckdb": duckdb.__version__,
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(json.loads(sys.argv[1]))) + "\n")
