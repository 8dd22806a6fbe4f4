"""Reading the engine's window through APSW instead of the standard sqlite3, rows dropped: what the
other driver would save (it is not used: see seqexport_dagster/source/reader.py for why).

Runs under the peer interpreter of `benchmarks/peers.py`, so it imports nothing of ours.
``python -m benchmarks.apsw_read 'JSON params'`` (from the repository root) prints one JSON line like `benchmarks/child.py`.
"""

from __future__ import annotations

import itertools
import json
import sys
import time

import apsw

from benchmarks.procinfo import peak_rss_mb


def main(params: dict[str, object]) -> dict[str, object]:
    flags = apsw.SQLITE_OPEN_READONLY | (apsw.SQLITE_OPEN_NOMUTEX if params.get("nomutex") else 0)
    conn = apsw.Connection(str(params["source_path"]), flags=flags)
    columns = ", ".join(str(c) for c in params["columns"])  # type: ignore[attr-defined]
    sql = (
        f"SELECT {columns} FROM email_events WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ? "
        "ORDER BY recorded_at, id"
    )
    rows = 0
    cpu, wall = time.process_time(), time.perf_counter()
    cursor = conn.cursor().execute(sql, (params["account"], params["from"], params["to"]))
    while batch := list(itertools.islice(cursor, 500)):
        rows += len(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    conn.close()
    return {"task": "apsw_read", "wall": wall, "cpu": cpu, "rows": rows, "peak_rss_mb": peak_rss_mb()}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(json.loads(sys.argv[1]))) + "\n")
