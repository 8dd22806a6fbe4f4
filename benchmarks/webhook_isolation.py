"""One account's webhooks beside another's (issue 41): a real `seqexport serve` and a real dispatcher.

For each revision (``--before-rev``, default bfe50bc, then this checkout), in one run:

* a hanging receiver on 127.0.0.1 (reads each request, never answers) behind 3 webhooks of account
  ``flood``, and a fast receiver (checks signatures) behind 1 webhook of account ``acme``;
* `seqexport serve` (SQLite control plane under a temporary ``SEQEXPORT_HOME``), and a dispatcher
  process doing what the Dagster ``webhook_sensor`` does: one `webhook_dispatch.dispatch` with the
  revision's own per-tick limit and budget, a tick every ``--tick`` seconds (30, as the sensor's
  interval), back to back when a tick overruns; the same process records events in the outbox:
  ``--flood-events`` a second for ``flood`` and one every 5 s for ``acme``;
* ``--flooders`` threads of ``flood`` calling ``POST /v1/webhooks/{id}/test`` (a pause of
  ``--pause`` s after each answer), and one ``acme`` client calling ``GET /v1/webhooks`` and
  ``/readyz`` in turn, first alone for a few seconds, then beside the flood for ``--seconds``.

Figures per revision: acme's API latency p50/p99 alone and under the flood; acme's delivery delay
(receipt at its receiver minus the event's ``created_at``), and its events still pending at the end
with the oldest one's age; the outbox after ``--seconds`` (pending deliveries per account); the
dispatcher's ticks (duration, attempted, delivered); what the flood's test calls got. Run:
``python -m benchmarks.webhook_isolation [--seconds 60] [--tick 30] [--before-rev bfe50bc|''] [--json]``.
The default is short to spare a shared machine; the review's figure is the outbox after 60 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.hook_setup import prepare, seqexport_env
from benchmarks.revisions import export_revision

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REV = "bfe50bc"
FLOOD_HOOKS = 3

# What the webhook_sensor does each tick, with the revision's own limit and budget, plus the outbox
# feed (events recorded as a state change records them).
_DISPATCHER = """
import json, sys, threading, time
from seqexport_dagster.delivery import webhook_dispatch as wd
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.defs.webhooks import WEBHOOKS_PER_TICK
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.outbox import emit
from seqexport_dagster.store.webhook_records import EXPORT_PAUSED
from seqexport_dagster.store.webhooks import WebhookStore
seconds, tick, rate = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
api = Exports.from_settings(Settings.from_env())
engine = api.store.engine
store, send = WebhookStore(engine, api.store.box), wd.pinned_sender(api.policy)
print("ready", flush=True)  # imports done: their CPU is not the flood's
sys.stdin.readline()
stop = time.monotonic() + seconds

def feed():
    n = 0
    while time.monotonic() < stop:
        with engine.begin() as conn:
            for _ in range(rate):
                emit(conn, account_id="flood", kind=EXPORT_PAUSED, data={"n": n}, now_ms=api.clock())
            if n % 5 == 0:
                emit(conn, account_id="acme", kind=EXPORT_PAUSED, data={"n": n}, now_ms=api.clock())
        n += 1
        time.sleep(1)

threading.Thread(target=feed, daemon=True).start()
while time.monotonic() < stop:
    began = time.monotonic()
    report = wd.dispatch(store, send, api.clock, limit=WEBHOOKS_PER_TICK, budget_s=wd.DEFAULT_BUDGET_S)
    took = time.monotonic() - began
    print(json.dumps({"at_s": round(began - stop + seconds, 1), "took_s": round(took, 2), **report.as_dict()}), flush=True)
    time.sleep(max(0.0, tick - took))
"""


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def _client_loop(url: str, token: str, until: float, out: list[tuple[str, float]]) -> None:
    import httpx

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60) as c:
        while time.monotonic() < until:
            for path in ("/v1/webhooks", "/readyz"):
                began = time.perf_counter()
                try:
                    c.get(path)
                except httpx.HTTPError:
                    pass
                out.append((path, (time.perf_counter() - began) * 1000))
            time.sleep(0.1)


def _flooder(url: str, token: str, hooks: list[str], until: float, pause: float, got: Counter[str]) -> None:
    import httpx

    n = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60) as c:
        while time.monotonic() < until:
            try:
                status = str(c.post(f"/v1/webhooks/{hooks[n % len(hooks)]}/test").status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            got[status] += 1
            n += 1
            time.sleep(pause)


def _outbox(home: Path) -> dict[str, Any]:
    db = next(p for p in home.rglob("*.db") if "control" in p.name)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT account_id, status, count(*), min(created_at) FROM webhook_deliveries GROUP BY 1, 2"
        ).fetchall()
    return {f"{account} {status}": {"count": n, "oldest_ms": oldest} for account, status, n, oldest in rows}


def run(code: Path, args: argparse.Namespace) -> dict[str, Any]:
    from seqexport_dagster_tests.support.api_server import wait_ready
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import start_group, stop_group
    from seqexport_dagster_tests.support.webhook_receiver import receiver

    result: dict[str, Any] = {"code": str(code)}
    arrivals: list[tuple[float, dict[str, Any]]] = []

    def arrived(event: dict[str, Any]) -> None:
        arrivals.append((time.time() * 1000, event))

    with tempfile.TemporaryDirectory() as tmp, receiver(hang=True) as stuck, receiver(on_event=arrived) as fine:
        home = Path(tmp)
        env = seqexport_env(code, home, {"PATH": "/usr/bin:/bin"})
        made = prepare(
            code,
            env,
            {
                "flood": {"token": True, "url": stuck.url, "hooks": FLOOD_HOOKS},
                "acme": {"token": True, "url": fine.url, "hooks": 1},
            },
        )
        prepared = {
            "flood_token": made["flood"]["token"],
            "flood_hooks": made["flood"]["hooks"],
            "acme_token": made["acme"]["token"],
        }
        fine.secret = made["acme"]["secrets"][0]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_group(
            [str(Path(sys.executable).parent / "seqexport"), "serve", "--port", str(port)],
            log=home / "server.log",
            cwd=code,
            env=env,
        )
        dispatcher = None
        try:
            wait_ready(url, server)
            alone: list[tuple[str, float]] = []
            _client_loop(url, prepared["acme_token"], time.monotonic() + 4, alone)
            dispatcher = start_group(
                [sys.executable, "-c", _DISPATCHER, str(args.seconds), str(args.tick), str(args.flood_events)],
                cwd=code,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert dispatcher.stdin is not None and dispatcher.stdout is not None
            if dispatcher.stdout.readline().strip() != "ready":
                raise RuntimeError("the dispatcher did not start")
            dispatcher.stdin.write("go\n")
            dispatcher.stdin.flush()
            started = time.time() * 1000
            until = time.monotonic() + args.seconds
            got: Counter[str] = Counter()
            flood = [
                threading.Thread(
                    target=_flooder,
                    args=(url, prepared["flood_token"], prepared["flood_hooks"], until, args.pause, got),
                    daemon=True,
                )
                for _ in range(args.flooders)
            ]
            for t in flood:
                t.start()
            beside: list[tuple[str, float]] = []
            _client_loop(url, prepared["acme_token"], until, beside)
            ended = time.time() * 1000
            result["outbox_at_end"] = _outbox(home)
            for t in flood:
                t.join(timeout=70)
        finally:
            stop_group(server)
            if dispatcher is not None:
                stop_group(dispatcher, grace_s=2)
        ticks = [
            json.loads(line)
            for line in (dispatcher.stdout.read() if dispatcher and dispatcher.stdout else "").splitlines()
            if line.startswith("{")
        ]
    for name, sample in (("alone", alone), ("under_flood", beside)):
        for path in ("/v1/webhooks", "/readyz"):
            values = [ms for p, ms in sample if p == path]
            result[f"acme_{path.strip('/').replace('/', '_')}_{name}_ms"] = {
                "n": len(values),
                "p50": _pct(values, 0.5),
                "p99": _pct(values, 0.99),
                "max": round(max(values), 1) if values else None,
            }
    delays = [
        at - dt.datetime.fromisoformat(e["created_at"].replace("Z", "+00:00")).timestamp() * 1000
        for at, e in arrivals
        if e["account_id"] == "acme" and e["type"] != "webhook.test"
    ]
    pending = result["outbox_at_end"].get("acme pending")
    result["acme_delivery_delay_s"] = {
        "delivered": len(delays),
        "p50": _pct([d / 1000 for d in delays], 0.5),
        "max": round(max(delays) / 1000, 1) if delays else None,
        "still_pending": pending["count"] if pending else 0,
        "oldest_pending_age_s": round((ended - pending["oldest_ms"]) / 1000, 1) if pending else None,
    }
    result["flood_pending_at_end"] = result["outbox_at_end"].get("flood pending", {}).get("count", 0)
    result["flood_test_calls"] = dict(got)
    result["ticks"] = ticks
    result["seconds"] = round((ended - started) / 1000, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the flood lasts (default 60)")
    parser.add_argument("--tick", type=float, default=30.0, help="the dispatcher's interval (the sensor's: 30)")
    parser.add_argument("--flooders", type=int, default=48, help="threads calling the test send (default 48)")
    parser.add_argument("--pause", type=float, default=1.0, help="each flooder's pause between calls, s")
    parser.add_argument("--flood-events", type=int, default=10, help="flood's events a second into the outbox")
    parser.add_argument("--before-rev", default=BEFORE_REV, help="git revision of the 'before' code ('' for none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before_rev:
            before = export_revision(args.before_rev, Path(tmp) / "before")
            results["before"] = run(before, args)
        results["after"] = run(ROOT, args)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for name, r in results.items():
        flood = r["flood_test_calls"]
        print(f"{name} ({r['code']}), {r['seconds']} s of flood; test calls: {flood}")
        for key in ("acme_v1_webhooks_alone_ms", "acme_v1_webhooks_under_flood_ms", "acme_readyz_under_flood_ms"):
            print(f"  {key}: {r[key]}")
        print(f"  acme_delivery_delay_s: {r['acme_delivery_delay_s']}")
        print(f"  flood pending at end: {r['flood_pending_at_end']}; outbox: {r['outbox_at_end']}")
        print(f"  ticks: {[(t['at_s'], t['took_s'], t['attempted'], t['delivered']) for t in r['ticks']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
