"""The remote CLI's wall time per command, and ``seqexport --help``, before and after issue 40.

Each command runs as a customer runs it: a fresh ``python -m seqexport_dagster.cli ...`` process with
``SEQEXPORT_API_URL`` and an operator token, against one `seqexport serve` (this tree's, uvicorn on
127.0.0.1, its control plane on SQLite with one export and one webhook). "Before" is the code at
``--before-rev`` (``git archive``, `benchmarks.revisions`), "after" this tree; the two alternate run
by run, so load on the machine falls on both alike. Per command and tree: the median and best wall
time, the median CPU time of the process (user + system), and whether the process loaded SQLAlchemy
(one more run under ``python -X importtime``).

    python -m benchmarks.remote_cli [--repeat 7] [--before-rev bfe50bc] [--out RESULTS_remote_cli.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.revisions import export_revision

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REV = "bfe50bc"  # main before issue 40's lean remote path
#: The issue's targets on this machine's kind (issue 40, item 2).
TARGET_S = {"--help": 0.3, "remote": 0.5}


def _clean_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_") and "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(tree)
    return env


def _cli(
    tree: Path, args: list[str], env: dict[str, str], *extra: str
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """One CLI process of ``tree``: (wall s, CPU s, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *extra, "-m", "seqexport_dagster.cli", *args],
        cwd=tree, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def _imported(stderr: str) -> set[str]:
    """The modules named by ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _setup(home: Path) -> dict[str, str]:
    """This tree's control plane with one export and one webhook, and an operator token."""
    env = {**_clean_env(ROOT), "SEQEXPORT_HOME": str(home), "SEQEXPORT_ALLOW_LOCAL": "1"}

    def run(*args: str) -> Any:
        _, _, done = _cli(ROOT, [*args, "--json"], env)
        if done.returncode != 0:
            raise RuntimeError(f"seqexport {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return json.loads(done.stdout)

    run("init")
    export = run("create", "--account", "acme", "--provider", "local", "--bucket", str(home / "bucket"),
                 "--datasets", "all")  # fmt: skip
    run("webhooks", "add", "--account", "acme", "--url", "http://127.0.0.1:9/hook")
    token = run("tokens", "create", "--operator")
    return {"export": export["id"], "token": token["token"], **env}


def measure(repeat: int, before_rev: str) -> dict[str, Any]:
    from seqexport_dagster_tests.support.api_server import wait_ready
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import group_process

    with tempfile.TemporaryDirectory() as tmp:
        before = export_revision(before_rev, Path(tmp) / "before")
        trees = {"before": before, "after": ROOT}
        setup = _setup(Path(tmp) / "home")
        export, token = setup.pop("export"), setup.pop("token")
        port = free_port()
        serve = [sys.executable, "-m", "seqexport_dagster.cli", "serve", "--port", str(port)]
        with group_process(serve, env=setup, log=Path(tmp) / "serve.log", cwd=ROOT):
            url = f"http://127.0.0.1:{port}"
            wait_ready(url)
            remote = {"SEQEXPORT_API_URL": url, "SEQEXPORT_API_TOKEN": token}
            commands: dict[str, tuple[list[str], bool]] = {
                "--help": (["--help"], False),
                "list": (["list"], True),
                "status": (["status", export], True),
                "history": (["history", export], True),
                "frequency (a change)": (["frequency", export, "1h"], True),
                "webhooks list": (["webhooks", "list"], True),
            }
            results: dict[str, Any] = {}
            for name, (args, is_remote) in commands.items():
                envs = {t: {**_clean_env(tree), **(remote if is_remote else {})} for t, tree in trees.items()}
                walls: dict[str, list[float]] = {"before": [], "after": []}
                cpus: dict[str, list[float]] = {"before": [], "after": []}
                for t, tree in trees.items():  # one untimed run each: the page cache and .pyc files
                    _cli(tree, args, envs[t])
                for i in range(repeat):
                    for t in ("before", "after") if i % 2 == 0 else ("after", "before"):
                        wall, cpu, done = _cli(trees[t], args, envs[t])
                        if done.returncode != 0:
                            raise RuntimeError(
                                f"{t}: seqexport {' '.join(args)} exited {done.returncode}: {done.stderr}"
                            )
                        walls[t].append(wall)
                        cpus[t].append(cpu)
                row: dict[str, Any] = {}
                for t, tree in trees.items():
                    _, _, traced = _cli(tree, args, envs[t], "-X", "importtime")
                    row[t] = {
                        "median_s": round(statistics.median(walls[t]), 3),
                        "best_s": round(min(walls[t]), 3),
                        "cpu_median_s": round(statistics.median(cpus[t]), 3),
                        "loads_sqlalchemy": "sqlalchemy" in _imported(traced.stderr),
                    }
                row["after/before (median)"] = round(row["after"]["median_s"] / row["before"]["median_s"], 2)
                row["target_s"] = TARGET_S["--help" if name == "--help" else "remote"]
                results[name] = row
    return {
        "before_rev": before_rev,
        "after": "this tree",
        "repeat": repeat,
        "load_average": os.getloadavg(),
        "commands": results,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"remote CLI, one process per command, before {report['before_rev']} vs after (this tree), "
        f"{report['repeat']} runs each, interleaved; load {', '.join(f'{x:.1f}' for x in report['load_average'])}",
        f"{'command':24} {'before s':>9} {'after s':>9} {'ratio':>6} {'best b/a':>13} {'cpu b/a':>13} "
        f"{'target':>7}  sqlalchemy b/a",
    ]
    for name, row in report["commands"].items():
        b, a = row["before"], row["after"]
        lines.append(
            f"{name:24} {b['median_s']:9.3f} {a['median_s']:9.3f} {row['after/before (median)']:6.2f} "
            f"{b['best_s']:6.3f}/{a['best_s']:.3f} {b['cpu_median_s']:6.3f}/{a['cpu_median_s']:.3f} "
            f"{row['target_s']:7.2f}  {'yes' if b['loads_sqlalchemy'] else 'no'}/{'yes' if a['loads_sqlalchemy'] else 'no'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before-rev", default=BEFORE_REV)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    report = measure(args.repeat, args.before_rev)
    print(render(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
