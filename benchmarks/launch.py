"""Runs launched per second by the real ``dagster-daemon``, and the CPU of its run workers.

``N`` exports are due at once. The scheduler sensor batches due work (up to K exports per run, by day
and shard), so its first tick requests a few runs, not ``N``; the benchmark waits until every run has
ended and every export has written a part, and reports exports done per second beside runs. The daemon
(temporary DAGSTER_HOME, the repo's dagster.yaml with ``max_concurrent_runs`` raised to ``N`` so the
limit is not what is measured) dequeues and launches them through the default run launcher: the
code server spawns one process per run, and ``StartRun`` returns only once that process has
loaded the code. So the queue daemon, which launches one run after another unless
``dequeue_use_threads`` is set, launches at the speed of run-worker start-up.

Times come from the instance: run creation (the sensor's submission), RUN_STARTING (the queue
daemon picks the run), RUN_START (the worker is executing) and the end. CPU is sampled from
``/proc`` for every process of the daemon's process group (10 Hz; a worker's last < 0.1 s is lost):
run workers are the code server's ``multiprocessing`` spawn children.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seqexport_dagster_tests.support.processes import daemon_env, start_group, stop_group

ROOT = Path(__file__).resolve().parent.parent
TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class CpuSampler:
    """Largest CPU time seen per process of one process group, split into run workers and the rest."""

    pgid: int
    cpu: dict[int, float] = field(default_factory=dict)
    workers: set[int] = field(default_factory=set)

    def sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if int(fields[2]) != self.pgid:
                    continue
                self.cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
                if pid not in self.workers:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        if b"spawn_main" in handle.read():
                            self.workers.add(pid)
            except (OSError, IndexError, ValueError):
                continue  # exited between listing and reading

    def worker_cpu(self) -> list[float]:
        return [self.cpu[p] for p in self.workers]

    def other_cpu(self) -> float:
        return sum(v for p, v in self.cpu.items() if p not in self.workers)


def _setup(tmp: Path, n: int) -> tuple[str, str, str]:
    """Control plane and source with ``n`` exports of email_events, each 2 h behind (hourly)."""
    import sqlalchemy as sa

    from seqexport_dagster.clock import wall_clock_ms
    from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS
    from seqexport_dagster.delivery.assembly import control_plane_at
    from seqexport_dagster.demo.generator import Scale, generate_account
    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster.source.tables import create_source_tables
    from seqexport_dagster.store.crypto import new_key_spec

    keys, control, source = new_key_spec("bench"), f"sqlite:///{tmp}/control.db", f"sqlite:///{tmp}/source.db"
    created = (wall_clock_ms() - 2 * HOUR_MS) // MINUTE_MS * MINUTE_MS
    source_engine = sa.create_engine(source)
    create_source_tables(source_engine)
    store = control_plane_at(control, keys)
    store.migrate()
    for i in range(n):
        account = f"acct{i:03d}"
        generate_account(source_engine, account, created, created + 2 * HOUR_MS, scale=Scale(subscribers=20))
        store.create_export(
            account_id=account, destination=DestinationConfig("local", f"{tmp}/bucket", prefix=account),
            datasets=("email_events",), frequency="1h", lag_ms=MINUTE_MS, now_ms=created,
        )  # fmt: skip
    source_engine.dispose()
    store.engine.dispose()
    return keys, control, source


def _exported(tmp: Path, n: int) -> int:
    """How many of the ``n`` exports have written at least one part."""
    bucket = tmp / "bucket"
    return sum(1 for i in range(n) if any((bucket / f"acct{i:03d}").rglob("*.jsonl.gz")))


def measure(p: dict[str, Any]) -> dict[str, Any]:
    """One daemon, ``p['runs']`` due exports; ``p['threads']`` turns on ``dequeue_use_threads``."""
    import dagster as dg
    from dagster import DagsterEventType

    n, threads = int(p.get("runs", 20)), bool(p.get("threads", False))
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp_name:
        tmp = Path(tmp_name)
        keys, control, source = _setup(tmp, n)
        home = tmp / "dagster_home"
        home.mkdir()
        config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
        # Dagster's `concurrency:` and `run_queue:` blocks (the repo left the legacy run_coordinator).
        config.setdefault("concurrency", {}).setdefault("runs", {})["max_concurrent_runs"] = n
        queue = config.setdefault("run_queue", {})
        if threads:
            queue |= {"dequeue_use_threads": True, "dequeue_num_workers": int(p.get("workers", 4))}
        else:
            queue |= {"dequeue_use_threads": False}
        (home / "dagster.yaml").write_text(yaml.safe_dump(config))
        env = daemon_env(home, control, source, keys)
        daemon_bin = shutil.which("dagster-daemon", path=str(Path(sys.executable).parent)) or "dagster-daemon"
        log = tmp / "daemon.log"
        deadline = time.monotonic() + float(p.get("timeout", 600))
        os.environ["DAGSTER_HOME"] = str(home)  # the repo's dagster.yaml reads it
        # Storage created here first: the daemon and this process creating the SQLite files at
        # the same moment race on their Alembic stamps.
        with dg.DagsterInstance.from_config(str(home)) as instance:
            daemon = start_group([daemon_bin, "run", "-w", str(ROOT / "workspace.yaml")], log=log, cwd=ROOT, env=env)
            sampler = CpuSampler(daemon.pid)
            try:
                last_poll = 0.0
                while time.monotonic() < deadline:
                    if daemon.poll() is not None:
                        raise RuntimeError(f"dagster-daemon exited:\n{log.read_text()[-3000:]}")
                    sampler.sample()
                    if time.monotonic() - last_poll > 1:
                        last_poll = time.monotonic()
                        runs = instance.get_runs()
                        # The sensor batches due exports (up to K per run): done when every run has
                        # ended and every export has written a part, whatever the number of runs.
                        if runs and all(r.status.value in TERMINAL for r in runs) and _exported(tmp, n) == n:
                            break
                    time.sleep(0.1)
                else:
                    raise RuntimeError(f"{n} exports not written in time:\n{log.read_text()[-3000:]}")
                sampler.sample()
                records = instance.get_run_records()
                starting = {
                    r.dagster_run.run_id: min(
                        e.event_log_entry.timestamp
                        for e in instance.get_records_for_run(
                            r.dagster_run.run_id, of_type=DagsterEventType.RUN_STARTING
                        ).records
                    )
                    for r in records
                }  # fmt: skip
            finally:
                stop_group(daemon, grace_s=20)
                os.environ.pop("DAGSTER_HOME", None)
        failed = [r.dagster_run.run_id for r in records if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS]
        if failed:
            raise RuntimeError(f"{len(failed)} runs did not succeed:\n{log.read_text()[-3000:]}")
        written = sum(1 for _ in (tmp / "bucket").rglob("*.jsonl.gz"))
    ticked = sorted(
        ((r.create_timestamp.timestamp(), starting[r.dagster_run.run_id], r) for r in records), key=lambda t: t[0]
    )
    created = [c for c, _, _ in ticked]
    picked = [p for _, p, _ in ticked]
    started = [r.start_time or 0.0 for _, _, r in ticked]
    ended = [r.end_time or 0.0 for _, _, r in ticked]
    first = min(created)
    workers = sampler.worker_cpu()
    return {
        "exports": n,
        "runs": len(ticked),
        "threads": threads,
        "parts": written,
        "sensor_submit_s": max(created) - first,
        "first_pick_s": min(picked) - first,
        "last_pick_s": max(picked) - first,
        "last_start_s": max(started) - first,
        "last_end_s": max(ended) - first,
        "launched_per_s": len(ticked) / max(max(started) - first, 1e-9),
        "exports_per_s": n / max(max(ended) - first, 1e-9),
        "worker_cpu_s": statistics.mean(workers) if workers else 0.0,
        "workers_seen": len(workers),
        "daemon_cpu_s": sampler.other_cpu(),
    }


def summary(r: dict[str, Any]) -> str:
    mode = "dequeue_use_threads (4 workers)" if r["threads"] else "sequential dequeue (dequeue_use_threads off)"
    return (
        f"{mode}: {r['exports']} due exports in {r['runs']} batched runs (submitted within {r['sensor_submit_s']:.1f} s); "
        f"first picked {r['first_pick_s']:.1f} s after the first run's creation, last picked "
        f"{r['last_pick_s']:.1f} s, last started {r['last_start_s']:.1f} s, last ended {r['last_end_s']:.1f} s: "
        f"{r['launched_per_s']:.2f} runs launched/s, {r['exports_per_s']:.2f} exports done/s; run worker {r['worker_cpu_s']:.1f} CPU-s per run "
        f"({r['workers_seen']} workers sampled), daemon + code server {r['daemon_cpu_s']:.1f} CPU-s in all; "
        f"{r['parts']} parts written"
    )


def main(argv: list[str]) -> int:
    """``python -m benchmarks.launch ['{"runs": 20, "threads": false}']``: the summary, then one JSON line."""
    import json

    found = measure(json.loads(argv[0]) if argv else {})
    found["summary"] = summary(found)
    print(found["summary"])
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
