"""`seqexport serve` under a hostile client (issue 24): server memory and /healthz latency.

Figures, each against a fresh `seqexport serve` (SQLite control plane) in its own process group:

* **300 MB body**: one declared (``Content-Length``) and one chunked, from a valid account token,
  and one declared without a token: the server's peak RSS above its idle RSS;
* **8 × 64 MB headers** in parallel: the same;
* **/healthz p99**, from one sequential kept-alive client, alone (baseline) and while an attacker
  process keeps 200 slowloris connections open (a header line a second each; one the server closes
  is replaced) and repeats the 300 MB bodies and the 8 × 64 MB headers (``--pause`` seconds between
  one thread's attacks, 0.2 by default; 0 is a back-to-back flood); plus how long the server let a
  slowloris connection live.

Peak RSS is ``VmHWM``, reset before each attack (``/proc/<pid>/clear_refs``), so each figure is that
attack's own. ``--code DIR`` serves another checkout (``--code /work/main``: the figures before this
change; give ``--code`` twice to run both, interleaved ``--rounds`` times, with ratios). ``--single``
adds /healthz under each attack alone. ``/readyz`` (a control-plane query per request) is measured
under the combined attack too. Run:
``python -m benchmarks.http_attack [--seconds 15] [--code DIR [--code DIR]] [--rounds N] [--single] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_PREPARE = """
from seqexport_dagster.management.api import Exports
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.store.token import TokenStore
api = Exports.from_settings(Settings.from_env())
print(TokenStore(api.store.engine).create(account_id="acme", now_ms=api.clock())[0])
api.close()
"""


def _reset_peak(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass  # not permitted: the peak then includes earlier attacks (reported as such)


def _attack_rss(pid: int, idle: float, attack: Any) -> dict[str, Any]:
    from seqexport_dagster_tests.support.http_attack import rss_mb

    _reset_peak(pid)
    started = time.perf_counter()
    outcomes = attack()
    seconds = time.perf_counter() - started
    time.sleep(0.5)
    now, peak = rss_mb(pid)
    return {
        "peak_above_idle_mb": round(peak - idle, 1),
        "held_after_mb": round(now - idle, 1),
        "seconds": round(seconds, 2),
        "answers": sorted({str(o.status) for o in outcomes}),
    }


#: The attacks one at a time (each measured on its own), then all together.
SINGLE_ATTACKS = ("slowloris", "bodies", "headers")


def attacker(url: str, token: str, seconds: float, pause: float, kinds: str = "all") -> None:
    """The attacker process: slowloris throughout, big bodies and big headers on repeat, each
    thread waiting ``pause`` seconds between its attacks (0: back to back, a flood). ``kinds``: all,
    or one of `SINGLE_ATTACKS`."""
    from seqexport_dagster_tests.support.http_attack import MB, Slowloris, big_body, big_header

    stop = time.monotonic() + seconds
    slow = Slowloris(url, 200 if kinds in ("all", "slowloris") else 0, interval=1.0, reconnect=True)

    def repeat(call: Any) -> None:
        while time.monotonic() < stop:
            try:
                call()
            except OSError:
                time.sleep(0.1)
            time.sleep(pause)

    with slow.running():
        threads = []
        if kinds in ("all", "bodies"):
            threads += [threading.Thread(target=repeat, args=(lambda: big_body(url, token, 300 * MB),), daemon=True)]
        if kinds in ("all", "headers"):
            threads += [
                threading.Thread(target=repeat, args=(lambda: big_header(url, 64 * MB),), daemon=True) for _ in range(8)
            ]
        if not threads:
            time.sleep(max(0.0, stop - time.monotonic()))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, stop - time.monotonic()) + 30)
        lifetimes = slow.lifetimes
        print(
            json.dumps(
                {
                    "slowloris_closed_by_server": len(lifetimes),
                    "slowloris_longest_held_s": round(max(lifetimes), 1) if lifetimes else None,
                }
            ),
            flush=True,
        )


def run(seconds: float, code: Path, pause: float, *, memory_only: bool = False, single: bool = False) -> dict[str, Any]:
    from seqexport_dagster.store.crypto import new_key_spec
    from seqexport_dagster_tests.support.api_server import wait_ready
    from seqexport_dagster_tests.support.http_attack import (
        MB,
        big_body,
        big_header,
        healthz_latencies,
        p99,
        rss_mb,
    )
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import start_group, stop_group

    result: dict[str, Any] = {"code": str(code), "seconds": seconds, "pause_s": pause}
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "PATH": "/usr/bin:/bin",
            "SEQEXPORT_HOME": tmp,
            "SEQEXPORT_SECRET_KEYS": new_key_spec("bench"),
            "PYTHONPATH": str(code),
        }
        # The control plane and the token are made by the served code itself: another checkout's
        # migrations may differ from this one's.
        token = subprocess.run(
            [sys.executable, "-c", _PREPARE],
            env=env,
            cwd=code,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = start_group(
            [str(Path(sys.executable).parent / "seqexport"), "serve", "--port", str(port)],
            log=Path(tmp) / "server.log",
            cwd=code,
            env=env,
        )
        try:
            wait_ready(url, process)
            healthz_latencies(url, 1.0)  # warm: imports, pools, the first connection
            idle, _ = rss_mb(process.pid)
            result["idle_rss_mb"] = round(idle, 1)
            result["body_300mb_declared"] = _attack_rss(process.pid, idle, lambda: [big_body(url, token, 300 * MB)])
            result["body_300mb_chunked"] = _attack_rss(
                process.pid, idle, lambda: [big_body(url, token, 300 * MB, chunked=True)]
            )
            result["body_300mb_no_token"] = _attack_rss(process.pid, idle, lambda: [big_body(url, None, 300 * MB)])

            def headers() -> list[Any]:
                with ThreadPoolExecutor(8) as pool:
                    return list(pool.map(lambda _: big_header(url, 64 * MB), range(8)))

            result["headers_8x64mb"] = _attack_rss(process.pid, idle, headers)
            if memory_only:
                return result

            baseline = healthz_latencies(url, seconds)
            by_attack = {}
            for kind in SINGLE_ATTACKS if single else ():
                alone = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.http_attack", "--attacker", url, token]
                    + [str(seconds + 4.0), str(pause), kind],
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": f"{ROOT}"},
                    stdout=subprocess.DEVNULL,
                )
                time.sleep(2.0)
                by_attack[kind] = _latency(healthz_latencies(url, seconds), p99)
                alone.wait(timeout=seconds + 120)
            _reset_peak(process.pid)
            # The attack outlasts both measurements (healthz, then readyz for half as long).
            attack_s = 2.0 + seconds * 1.5 + 2.0
            attack = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.http_attack", "--attacker", url, token, str(attack_s), str(pause)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": f"{ROOT}"},
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(2.0)  # the slowloris connections are open and the floods under way
            under = healthz_latencies(url, seconds)
            # /readyz queries the control plane on every request: the path a check takes.
            ready_under = healthz_latencies(url, seconds / 2, path="/readyz")
            out, _ = attack.communicate(timeout=attack_s + 120)
            now, peak = rss_mb(process.pid)
            report = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
            result["healthz"] = {
                "baseline": _latency(baseline, p99),
                "under_attack": _latency(under, p99),
                "by_attack": by_attack,
                "readyz_under_attack": _latency(ready_under, p99),
                "slowloris_closed_by_server": report.get("slowloris_closed_by_server"),
                "slowloris_longest_held_s": report.get("slowloris_longest_held_s"),
                "peak_above_idle_mb_during_attack": round(peak - idle, 1),
            }
        finally:
            stop_group(process)
    return result


def _latency(latencies: list[float], p99: Any) -> dict[str, float]:
    return {
        "requests": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(p99(latencies), 2),
        "max_ms": round(max(latencies), 2),
        "failed": sum(1 for v in latencies if v >= 60_000),
    }


def render(r: dict[str, Any]) -> str:
    lines = [
        f"seqexport serve under attack (code: {r['code']}), idle RSS {r['idle_rss_mb']} MB, "
        f"attacker pause {r['pause_s']} s"
    ]
    for name in ("body_300mb_declared", "body_300mb_chunked", "body_300mb_no_token", "headers_8x64mb"):
        f = r[name]
        lines.append(
            f"  {name:22} peak +{f['peak_above_idle_mb']:7.1f} MB, held after +{f['held_after_mb']:7.1f} MB, "
            f"{f['seconds']:6.2f} s, answers {','.join(f['answers'])}"
        )
    h = r.get("healthz")
    if h is None:
        return "\n".join(lines)
    names = {
        "baseline": "/healthz alone",
        "under_attack": "/healthz under attack",
        "readyz_under_attack": "/readyz under attack",
    }
    for label, name in names.items():
        f = h.get(label)
        if f is None:
            continue
        lines.append(
            f"  {name:22} p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:8.2f} ms  max {f['max_ms']:8.2f} ms  "
            f"n={f['requests']} failed={f['failed']}"
        )
    for kind, f in h.get("by_attack", {}).items():
        lines.append(
            f"  /healthz, {kind + ' alone':12} p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:8.2f} ms  "
            f"max {f['max_ms']:8.2f} ms  n={f['requests']} failed={f['failed']}"
        )
    lines.append(
        f"  slowloris (200 kept open, replaced when closed): the server closed {h['slowloris_closed_by_server']}, "
        f"none held longer than {h['slowloris_longest_held_s']} s; "
        f"peak RSS during the combined attack +{h['peak_above_idle_mb_during_attack']} MB"
    )
    return "\n".join(lines)


def _figure(result: dict[str, Any], part: str | tuple[str, str], key: str) -> float:
    where = result["healthz"]
    for name in (part,) if isinstance(part, str) else part:
        where = where[name]
    return float(where[key])


def compare(results: dict[str, list[dict[str, Any]]]) -> str:
    """Median over the rounds of each checkout's figures, and each as a ratio to the first checkout."""
    figures: list[tuple[str, str | tuple[str, str], str]] = [
        ("/healthz p50 under attack", "under_attack", "p50_ms"),
        ("/healthz p99 under attack", "under_attack", "p99_ms"),
        ("/readyz p99 under attack", "readyz_under_attack", "p99_ms"),
        ("/healthz p99 alone", "baseline", "p99_ms"),
    ]
    if all("by_attack" in r.get("healthz", {}) and r["healthz"]["by_attack"] for rs in results.values() for r in rs):
        figures += [(f"/healthz p99, {kind} alone", ("by_attack", kind), "p99_ms") for kind in SINGLE_ATTACKS]
    first = next(iter(results))
    lines = ["side by side (median of the rounds; ratio: this checkout / the first):"]
    for code, runs in results.items():
        cells = []
        for label, part, key in figures:
            mine = statistics.median(_figure(r, part, key) for r in runs)
            base = statistics.median(_figure(r, part, key) for r in results[first])
            cells.append(f"{label} {mine:.1f} ms ({mine / base:.2f}x)")
        lines.append(f"  {code}: " + "; ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http_attack", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="each /healthz measurement")
    parser.add_argument(
        "--code",
        type=Path,
        action="append",
        help="a checkout to serve (default: this one); give two to compare them side by side, interleaved",
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each checkout, alternating")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="the memory figures only (for a server that would not survive the rest)",
    )
    parser.add_argument(
        "--pause", type=float, default=0.2, help="seconds each attacker thread waits between attacks (0: a flood)"
    )
    parser.add_argument(
        "--single", action="store_true", help="also /healthz under each attack alone (slowloris, bodies, headers)"
    )
    parser.add_argument("--attacker", nargs="+", help=argparse.SUPPRESS)  # URL TOKEN SECONDS PAUSE [KINDS]
    args = parser.parse_args(argv)
    if args.attacker:
        url, token, seconds, pause, *kinds = args.attacker
        attacker(url, token, float(seconds), float(pause), *kinds)
        return 0
    codes = args.code or [ROOT]
    results: dict[str, list[dict[str, Any]]] = {str(c.resolve()): [] for c in codes}
    for round_ in range(args.rounds):
        for code in codes:  # interleaved: each round runs every checkout under the same load
            result = run(args.seconds, code.resolve(), args.pause, memory_only=args.memory_only, single=args.single)
            result["round"] = round_ + 1
            result["load_average"] = os.getloadavg()
            print(render(result) + f"\n  (round {round_ + 1}, load average {os.getloadavg()[0]:.1f})", flush=True)
            results[str(code.resolve())].append(result)
    if len(codes) > 1 and not args.memory_only:
        print(compare(results))
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
