"""Issue 46: the engine beside DuckDB, its floor and pyarrow, each reading a window-sized source.

``python -m benchmarks --only compare`` (or the ``compare`` section of ``make bench``). For SQLite and
for PostgreSQL, in ``rounds`` rounds, each round running every task once in a fresh process, the
order rotated round by round so a neighbour's burst of load does not always hit the same task:

- engine JSONL and engine Parquet (`Runner.write_window` into a local folder);
- DuckDB ``COPY (SELECT …) TO … (FORMAT JSON, COMPRESSION GZIP)`` and ``(FORMAT PARQUET, COMPRESSION
  ZSTD)``, 1 thread, reading the source through its sqlite / postgres extension (DuckDB 1.5.5 in the
  peer virtualenv, `peers.py`). DuckDB's gzip is zlib's default level, 6, which COPY does not let one
  change; ours is isal level 1. DuckDB's zstd is level 3, as ours;
- the floor: read + build + encode + gzip, streamed, nothing else (`child.floor`);
- pyarrow streamed: the window into one zstd Parquet file with no checks (`child.pyarrow_stream`).

The SQLite source is a file holding only the window's rows: DuckDB's SQLite reader does not push the
window's ``WHERE`` down and scans the whole table (``EXPLAIN ANALYZE`` of a 10,000-row window of the
5M-row day read all of it), which made the earlier anchor unfair. The PostgreSQL database holds the
same rows (`data.ensure_postgres`). Figures are CPU-s of the measuring process per million rows
(median of the rounds, with min-max), its peak RSS and the file's bytes; PostgreSQL's own CPU is not
counted for anyone.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
from pathlib import Path
from typing import Any

from benchmarks import data
from benchmarks.peers import peer_python

TASKS = ("engine_jsonl", "engine_parquet", "duckdb_json", "duckdb_parquet", "floor", "pyarrow")
LABELS = {
    "engine_jsonl": "engine, gzip JSONL",
    "engine_parquet": "engine, Parquet",
    "duckdb_json": "DuckDB COPY JSON gzip (zlib 6), 1 thread",
    "duckdb_parquet": "DuckDB COPY Parquet zstd, 1 thread",
    "floor": "floor: read + build + encode + gzip",
    "pyarrow": "pyarrow streamed to Parquet, no checks",
}


def window_file(src: data.Source, size: int, folder: Path) -> Path:
    """A SQLite file holding only the ``size`` window's rows (cached beside the generated source)."""
    from seqexport_dagster.contract.window import iso_ms
    from seqexport_dagster.source.tables import create_source_tables

    to_ms, rows = src.windows[size]
    path = folder / f"window_{src.rows}_{size}.db"
    if path.exists():
        with sqlite3.connect(path) as conn:
            if conn.execute("SELECT count(*) FROM email_events").fetchone()[0] == rows:
                return path
        path.unlink()
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        create_source_tables(engine)
    finally:
        engine.dispose()
    conn = sqlite3.connect(path)
    try:
        conn.execute("ATTACH ? AS src", (str(src.path),))
        conn.execute(
            "INSERT INTO email_events SELECT * FROM src.email_events "
            "WHERE account_id = ? AND recorded_at > ? AND recorded_at <= ? ORDER BY recorded_at, id",
            (data.ACCOUNT, iso_ms(data.DAY0), iso_ms(to_ms)),
        )
        conn.commit()
        conn.execute("DETACH src")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return path


def _task(name: str, source: str, common: dict[str, Any], peer: Path, child: Any, peer_child: Any) -> dict[str, Any]:
    pg = source == "postgresql"
    if name == "engine_jsonl":
        return dict(child("engine", **common))
    if name == "engine_parquet":
        return dict(child("engine", format="parquet", **common))
    if name in ("duckdb_json", "duckdb_parquet"):
        params = {k: common[k] for k in ("account", "from", "to", "columns", "tmp")}
        params |= {"pg_dsn": common["dsn"]} if pg else {"source_path": common["source_path"]}
        return dict(peer_child(peer, "benchmarks.duckdb_sqlite", threads=1, format=name.split("_")[1], **params))
    if name == "floor":
        return dict(child("floor", **common))
    return dict(child("pyarrow_stream", **common))


def compare(
    src: data.Source, size: int, tmp: str, *, pg_name: str, rounds: int, data_dir: Path, child: Any, peer_child: Any
) -> dict[str, Any]:
    """Every task on both sources, ``rounds`` rotated rounds; the raw runs by source and task."""
    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.contract.window import iso_ms

    to_ms, rows = src.windows[size]
    lite = window_file(src, size, data_dir)
    pg_url = data.ensure_postgres(src, size, pg_name)
    peer = peer_python(data_dir)
    base = {"to_ms": to_ms, "tmp": tmp, "account": data.ACCOUNT, "from": iso_ms(data.DAY0), "to": iso_ms(to_ms),
            "columns": list(DATASETS["email_events"].field_names)}  # fmt: skip
    sources = {
        "sqlite": base | {"source_url": f"sqlite:///{lite}", "source_path": str(lite)},
        "postgresql": base | {"source_url": pg_url, "dsn": f"host=127.0.0.1 port=5432 user=postgres dbname={pg_name}",
                              "pg_uri": f"postgresql://postgres@127.0.0.1:5432/{pg_name}"},
    }  # fmt: skip
    order = [(s, t) for s in sources for t in TASKS]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {t: [] for t in TASKS} for s in sources}
    loads = []
    for r in range(rounds):
        loads.append(os.getloadavg()[0])
        shift = r * 5 % len(order)
        for source, name in order[shift:] + order[:shift]:
            found = _task(name, source, sources[source], peer, child, peer_child)
            if found["rows"] != rows:
                raise RuntimeError(f"{source} {name} read {found['rows']} rows, the window holds {rows}")
            runs[source][name].append(found)
        print(f"  round {r + 1}/{rounds} done (load {loads[-1]:.1f})", flush=True)
    return {"rows": rows, "rounds": rounds, "load_1min": loads, "runs": runs}


def summary(found: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Median and min-max CPU-s per million rows, median peak RSS and bytes, by source and task."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for source, tasks in found["runs"].items():
        out[source] = {}
        for name, runs in tasks.items():
            per_m = [r["cpu"] / r["rows"] * 1e6 for r in runs]
            size = runs[0].get("bytes") or runs[0].get("gzip_bytes") or 0
            out[source][name] = {
                "cpu_s_per_m": statistics.median(per_m),
                "min": min(per_m),
                "max": max(per_m),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                "bytes": size,
            }
    return out


def table(found: dict[str, Any]) -> list[str]:
    """Markdown lines: one table per source, then the ratios the issue asks for."""
    s = summary(found)
    lines = []
    for source, tasks in s.items():
        lines += [f"**{source}**, {found['rows']:,} rows, {found['rounds']} rounds:", "",
                  "| what | CPU-s per million rows, median (min-max) | peak RSS MB | file MB |", "|---|---:|---:|---:|"]  # fmt: skip
        for name, f in tasks.items():
            lines.append(f"| {LABELS[name]} | {f['cpu_s_per_m']:.2f} ({f['min']:.2f}-{f['max']:.2f}) | "
                         f"{f['peak_rss_mb']:.0f} | {f['bytes'] / 2**20:.1f} |")  # fmt: skip
        t = tasks
        lines += ["", f"- DuckDB JSON / engine JSONL CPU: {t['duckdb_json']['cpu_s_per_m'] / t['engine_jsonl']['cpu_s_per_m']:.2f}× (target ≥ 2×)",
                  f"- DuckDB Parquet / engine Parquet CPU: {t['duckdb_parquet']['cpu_s_per_m'] / t['engine_parquet']['cpu_s_per_m']:.2f}× (target ≥ 1×)",
                  f"- engine JSONL / floor: {t['engine_jsonl']['cpu_s_per_m'] / t['floor']['cpu_s_per_m']:.2f}×",
                  f"- engine Parquet / pyarrow streamed: {t['engine_parquet']['cpu_s_per_m'] / t['pyarrow']['cpu_s_per_m']:.2f}×",
                  f"- engine Parquet / engine JSONL: {t['engine_parquet']['cpu_s_per_m'] / t['engine_jsonl']['cpu_s_per_m']:.2f}×", ""]  # fmt: skip
    loads = found["load_1min"]
    lines.append(f"1-minute load average at the start of each round: {min(loads):.1f}-{max(loads):.1f} (2 vCPUs).")
    return lines


def save(found: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps({"summary": summary(found), "load_1min": found["load_1min"], "rows": found["rows"],
                                "rounds": found["rounds"]}, indent=1) + "\n")  # fmt: skip
