"""`seqexport verify` against each hostile input of issue 41's review, a revision before beside this tree.

    python -m benchmarks.verify_hostile [--before-rev bfe50bc] [--timeout 90] [--kill-above-mb 3000]

Each input is planted once (a local folder, or a hostile S3 server on 127.0.0.1 from
`seqexport_dagster_tests.support.hostile_bucket`), then the CLI of each tree runs against it in a
child process of its own (its own process group): its exit code, its first problem (or error), its
wall time and its peak RSS (``VmHWM``, read by the child as it exits, and polled while it runs so a
child stopped at the timeout or past ``--kill-above-mb`` still has a figure). The child past
``--kill-above-mb`` is stopped: the bucket is hostile, the machine is shared. The "before" tree is
``git archive`` of the revision (`benchmarks.revisions.export_revision`); the inputs and the server
come from this tree for both. Writes ``benchmarks/RESULTS_verify_hostile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.procinfo import peak_rss_mb
from benchmarks.revisions import ROOT, export_revision

MARK = "MEASURED "
#: The child: the tree's own CLI, its VmHWM printed as it exits (whatever the CLI raised).
CHILD = """
import json, sys, time
started = time.monotonic()
code = 1
try:
    from seqexport_dagster.cli import main
    code = main(sys.argv[1:])
finally:
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print("MEASURED " + json.dumps({"peak_rss_mb": round(hwm / 1024, 1), "seconds": round(time.monotonic() - started, 2)}), file=sys.stderr, flush=True)
sys.exit(code)
"""
READ_KEY = ("--access-key-id", "reader", "--secret-env", "READ_SECRET")


@dataclass
class Outcome:
    code: int | None  # None: stopped (timeout or memory)
    answer: str
    peak_rss_mb: float
    seconds: float


@dataclass(frozen=True)
class Case:
    name: str
    local: Callable[[Path], Any] | None = None  # plants into a folder
    server_mode: str | None = None  # or a hostile S3 server in this mode


def cases() -> list[Case]:
    from seqexport_dagster_tests.support import hostile_objects as h

    return [
        Case("Parquet part of 1 M rows (footer)", local=h.million_rows),
        Case("Parquet part of 6 M rows (footer)", local=lambda root: h.million_rows(root, 6_000_000)),
        Case("zstd Parquet part claiming 944 MB", local=h.claimed_bomb),
        Case("dictionary Parquet part expanding to 944 MB", local=h.dictionary_bomb),
        Case("endless manifest listing", server_mode="manifestlist"),
        Case("3 manifests of 64 MiB", server_mode="bigmanifest"),
        Case("malformed manifests", local=h.malformed_manifests),
    ]


def run_child(tree: Path, argv: list[str], timeout: float, kill_above_mb: float) -> Outcome:
    from seqexport_dagster_tests.support.processes import group_process

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_")}
    env.update(PYTHONPATH=str(tree), READ_SECRET="read-secret-value")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    command = [sys.executable, "-P", "-c", CHILD, *argv]  # -P: no working folder on the path, only the tree
    started = time.monotonic()
    peak = 0.0
    stopped = ""
    with group_process(
        command, grace_s=2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env
    ) as process:
        while True:
            try:
                out, err = process.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                peak = max(peak, peak_rss_mb(process.pid))
                if time.monotonic() - started > timeout:
                    stopped = f"still running after {timeout:.0f} s; stopped"
                elif peak > kill_above_mb:
                    stopped = f"past {kill_above_mb:.0f} MB; stopped"
                if stopped:
                    process.kill()
                    out, err = process.communicate()
                    break
    seconds = round(time.monotonic() - started, 2)
    lines = err.splitlines()
    measured = [json.loads(line[len(MARK) :]) for line in lines if line.startswith(MARK)]
    if measured and not stopped:
        peak = max(peak, measured[-1]["peak_rss_mb"])
        seconds = measured[-1]["seconds"]
    return Outcome(None if stopped else process.returncode, stopped or _answer(out), round(peak, 1), seconds)


def _answer(out: str) -> str:
    """The report's first problem, or the CLI's error, in one line."""
    try:
        report = json.loads(out)
    except ValueError:
        return out.strip().splitlines()[0][:160] if out.strip() else "-"
    if "error" in report:
        return f"error: {report['error'].get('message', '')[:140]}"
    problems = report.get("problems", [])
    kinds = sorted({p["kind"] for p in problems})
    first = problems[0]["detail"][:100] if problems else "no problem"
    return f"{len(problems)} problem(s) {', '.join(kinds)}: {first}"


@contextmanager
def planted(case: Case, scratch: Path) -> Iterator[list[str]]:
    from seqexport_dagster_tests.support import hostile_bucket

    if case.local is not None:
        folder = scratch / case.name.replace(" ", "_")
        folder.mkdir(parents=True)
        case.local(folder)
        yield [str(folder)]
        return
    assert case.server_mode is not None
    with hostile_bucket.running(case.server_mode) as bucket:
        yield [bucket.source, "--endpoint", bucket.endpoint, *READ_KEY]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-rev", default="bfe50bc")
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--kill-above-mb", type=float, default=3000.0)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS_verify_hostile.json"))
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="verify-hostile-") as tmp:
        scratch = Path(tmp)
        before = export_revision(args.before_rev, scratch / "before") if args.before_rev else None
        for case in cases():
            if args.only not in case.name:
                continue
            with planted(case, scratch) as where:
                row: dict[str, Any] = {"case": case.name}
                for label, tree in (("before", before), ("after", ROOT)):
                    if tree is None:
                        continue
                    outcome = run_child(tree, ["verify", *where, "--json"], args.timeout, args.kill_above_mb)
                    row[label] = asdict(outcome)
                    print(f"{case.name:<46} {label:<6} exit {outcome.code!s:>4}  {outcome.peak_rss_mb:>7.1f} MB"
                          f"  {outcome.seconds:>6.2f} s  {outcome.answer[:110]}", flush=True)  # fmt: skip
                results.append(row)
    Path(args.out).write_text(
        json.dumps({"before_rev": args.before_rev, "timeout_s": args.timeout, "results": results}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
