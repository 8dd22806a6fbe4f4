"""The scheduler sensor's interval under a real `dagster-daemon` while webhooks hang (issue 41).

For each revision (``--before-rev``, default bfe50bc, then this checkout), one after the other in
one run:

* a receiver on 127.0.0.1 that reads each request and never answers, behind ``--hooks`` webhooks of
  account ``flood``, with ``--events`` events already in the outbox (so ``hooks x events``
  deliveries are due from the first tick);
* the revision's own `dagster-daemon run` on its own ``workspace.yaml`` (PYTHONPATH at that tree),
  in its own process group, with ``DAGSTER_HOME`` a temporary folder holding that revision's
  ``deploy/dagster.yaml`` and a SQLite control plane under a temporary ``SEQEXPORT_HOME``
  (``SEQEXPORT_ALLOW_LOCAL=1`` so the loopback receiver is allowed), for ``--seconds``; then the
  daemon's group is stopped by its PID.

Then the sensor ticks are read from that Dagster instance (``get_ticks`` of each sensor's origin):
the intervals between ``scheduler_sensor`` ticks (it asks for 30 s), and each ``webhook_sensor``
tick's duration with what it reported. The load average is recorded before and after each revision
(the machine is shared: a busy machine lengthens every interval, on both revisions alike).

    python -m benchmarks.sensor_interval [--seconds 120] [--before-rev bfe50bc|''] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.hook_setup import prepare, seqexport_env
from benchmarks.revisions import export_revision

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REV = "bfe50bc"  # main before issue 41's fix (sensors on one thread, webhook ticks of ~41 s)


def _load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)], "cpus": os.cpu_count()}


def _ticks(home: Path) -> dict[str, list[dict[str, Any]]]:
    """Every sensor's ticks in the instance at ``home``, oldest first."""
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorType

    out: dict[str, list[dict[str, Any]]] = {}
    os.environ["DAGSTER_HOME"] = str(home)  # the instance yaml's storage names it
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=10_000)
            out[state.name] = [
                {
                    "start": t.timestamp,
                    "took_s": round(t.end_timestamp - t.timestamp, 2) if t.end_timestamp else None,
                    "status": t.status.value,
                    "skip_reason": t.skip_reason,
                }
                for t in sorted(ticks, key=lambda t: t.timestamp)
            ]
    return out


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median_s": round(statistics.median(values), 1),
        "max_s": round(max(values), 1),
        "min_s": round(min(values), 1),
    }


def run(code: Path, args: argparse.Namespace) -> dict[str, Any]:
    from seqexport_dagster_tests.support.processes import start_group, stop_group
    from seqexport_dagster_tests.support.webhook_receiver import receiver

    result: dict[str, Any] = {"code": str(code), "load_before": _load()}
    with tempfile.TemporaryDirectory() as tmp, receiver(hang=True) as stuck:
        seq_home, dagster_home = Path(tmp) / "seqexport", Path(tmp) / "dagster_home"
        seq_home.mkdir()
        dagster_home.mkdir()
        (dagster_home / "dagster.yaml").write_text((code / "deploy" / "dagster.yaml").read_text())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env.pop(proxy, None)
        env = seqexport_env(code, seq_home, env) | {
            "DAGSTER_HOME": str(dagster_home),
            "SEQEXPORT_DATABASE_URL": f"sqlite:///{seq_home / 'control.db'}",
            "SEQEXPORT_SOURCE_URL": f"sqlite:///{seq_home / 'source.db'}",
        }
        # hooks x events deliveries due from the first tick
        prepare(code, env, {"flood": {"url": stuck.url, "hooks": args.hooks, "events": args.events}})
        log = Path(tmp) / "daemon.log"
        daemon = start_group(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(code / "workspace.yaml")],
            log=log,
            cwd=code,
            env=env,
        )
        started = time.time()
        try:
            time.sleep(args.seconds)
        finally:
            stop_group(daemon)
        result["daemon_seconds"] = round(time.time() - started, 1)
        result["load_after"] = _load()
        result["receiver_most_held"] = getattr(stuck, "most_held", None)
        ticks = _ticks(dagster_home)
        result["daemon_log_tail"] = log.read_text(errors="replace")[-1500:] if not ticks else None
    sched = ticks.get("scheduler_sensor", [])
    hooks = ticks.get("webhook_sensor", [])
    starts = [t["start"] for t in sched]
    result["scheduler_sensor_intervals_s"] = [round(b - a, 1) for a, b in zip(starts, starts[1:], strict=False)]
    result["scheduler_sensor_interval"] = _stats(result["scheduler_sensor_intervals_s"])
    result["scheduler_sensor_ticks"] = len(sched)
    result["scheduler_sensor_at_s"] = [round(t["start"] - started, 1) for t in sched]
    result["webhook_sensor_ticks"] = [
        {"at_s": round(t["start"] - started, 1), "took_s": t["took_s"], "reported": t["skip_reason"]} for t in hooks
    ]
    result["webhook_sensor_took"] = _stats([t["took_s"] for t in hooks if t["took_s"] is not None])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long each daemon runs (default 120)")
    parser.add_argument("--hooks", type=int, default=3, help="webhooks behind the hanging receiver (default 3)")
    parser.add_argument("--events", type=int, default=600, help="events due at the start, per webhook (default 600)")
    parser.add_argument("--before-rev", default=BEFORE_REV, help="git revision of the 'before' code ('' for none)")
    parser.add_argument("--out", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "args": vars(args),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.before_rev:
            before = export_revision(
                args.before_rev, Path(tmp) / "before", ("seqexport_dagster", "deploy", "workspace.yaml")
            )
            results["before"] = run(before, args)
        results["after"] = run(ROOT, args)
    results["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    for name in ("before", "after"):
        r = results.get(name)
        if r is None:
            continue
        print(f"{name} ({r['code']}), daemon {r['daemon_seconds']} s, load {r['load_before']} -> {r['load_after']}")
        print(f"  scheduler_sensor: {r['scheduler_sensor_ticks']} ticks, interval {r['scheduler_sensor_interval']}")
        print(f"    started at (s after the daemon): {r['scheduler_sensor_at_s']}")
        print(f"    intervals: {r['scheduler_sensor_intervals_s']}")
        print(f"  webhook_sensor took: {r['webhook_sensor_took']}")
        for t in r["webhook_sensor_ticks"]:
            print(f"    at {t['at_s']} s took {t['took_s']} s: {t['reported']}")
        if r.get("daemon_log_tail"):
            print(f"  no ticks; daemon log:\n{r['daemon_log_tail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
