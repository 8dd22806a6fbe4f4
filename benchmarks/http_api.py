"""The HTTP API beside the in-process Python API: requests/s and p99 latency for an export's status
(``GET /v1/exports/{id}``) and the list (``GET /v1/exports``, operator token: every export) at
``--exports`` exports on PostgreSQL.

The server is `seqexport serve` (uvicorn, one process) in its own process group on 127.0.0.1; the
client is one keep-alive httpx connection, sequential, so latency is per request and requests/s is
its inverse. The in-process figure is the same call through `api.Exports` plus the same JSON shape
(`presentation`) and `json.dumps`, so the ratio is what HTTP, auth, tenancy and the event loop
add. Run: ``python -m benchmarks.http_api [--exports 1000] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from benchmarks.control import _bulk_exports
from benchmarks.data import DAY0, PG_ADMIN_URL

ROOT = Path(__file__).resolve().parent.parent


def _measure(call: Callable[[], object], seconds: float) -> dict[str, float]:
    for _ in range(5):
        call()  # warm caches, pools and connections
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(latencies) < 20:
        started = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - started)
    latencies.sort()
    return {
        "requests": len(latencies),
        "per_s": len(latencies) / sum(latencies),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def run(exports_n: int, seconds: float) -> dict[str, Any]:
    from seqexport_dagster.delivery.settings import Settings
    from seqexport_dagster.management import presentation as shapes
    from seqexport_dagster.management.api import Exports
    from seqexport_dagster.store.crypto import new_key_spec
    from seqexport_dagster.store.token import TokenStore
    from seqexport_dagster_tests.support.api_server import wait_ready
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import start_group, stop_group

    name = f"seqexport_bench_api_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    spec = new_key_spec("bench")
    process: subprocess.Popen[bytes] | None = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"SEQEXPORT_DATABASE_URL": url, "SEQEXPORT_SECRET_KEYS": spec, "SEQEXPORT_HOME": tmp}
            api = Exports.from_settings(Settings.from_env(env))
            _bulk_exports(api.store, exports_n, DAY0)
            token, _ = TokenStore(api.store.engine).create(account_id=None, now_ms=DAY0)
            target = api.list()[exports_n // 2].id
            port = free_port()
            process = start_group(
                [str(Path(sys.executable).parent / "seqexport"), "serve", "--port", str(port)],
                log=Path(tmp) / "server.log",
                cwd=ROOT,
                # A bare environment, but the caller's import path (a checkout run without installing).
                env={"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}, **env},
            )
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, process)
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, trust_env=False) as c:
                assert len(c.get("/v1/exports").json()) == exports_n

                def http_status() -> object:
                    return c.get(f"/v1/exports/{target}").raise_for_status()

                def http_list() -> object:
                    return c.get("/v1/exports").raise_for_status()

                def py_status() -> object:
                    return json.dumps(shapes.status_json(api.status(target)))

                def py_list() -> object:
                    return json.dumps([shapes.export_json(r) for r in api.list()])

                # Interleaved halves, so a noisy neighbour hurts both sides alike.
                figures: dict[str, list[dict[str, float]]] = {}
                for _ in range(2):
                    for label, call in (
                        ("status: HTTP", http_status),
                        ("status: Python API", py_status),
                        ("list: HTTP", http_list),
                        ("list: Python API", py_list),
                    ):
                        figures.setdefault(label, []).append(_measure(call, seconds / 2))
            api.close()
    finally:
        if process is not None:
            stop_group(process)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    merged: dict[str, Any] = {}
    for label, runs in figures.items():
        requests = sum(r["requests"] for r in runs)
        merged[label] = {
            "requests": requests,
            "per_s": requests / sum(r["requests"] / r["per_s"] for r in runs),
            "p50_ms": statistics.median(r["p50_ms"] for r in runs),
            "p99_ms": max(r["p99_ms"] for r in runs),
        }
    return {"exports": exports_n, "seconds": seconds, "results": merged}


def render(result: dict[str, Any]) -> str:
    r = result["results"]
    lines = [
        f"HTTP API vs in-process Python API, {result['exports']:,} exports on PostgreSQL, one sequential client",
        f"{'call':22} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'n':>7}",
    ]
    for label, f in r.items():
        lines.append(f"{label:22} {f['per_s']:9.0f} {f['p50_ms']:8.2f} {f['p99_ms']:8.2f} {f['requests']:7d}")
    for call in ("status", "list"):
        http, py = r[f"{call}: HTTP"], r[f"{call}: Python API"]
        lines.append(
            f"{call}: Python API / HTTP throughput {py['per_s'] / http['per_s']:.2f}x, "
            f"HTTP p99 / Python p99 {http['p99_ms'] / py['p99_ms']:.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http_api", description=__doc__)
    parser.add_argument("--exports", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=6.0, help="per call and side, in two interleaved halves")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args(argv)
    result = run(args.exports, args.seconds)
    print(render(result))
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
