"""`make test` on a fresh machine (issue 25, item 5): the target itself starts PostgreSQL and installs
chromium when missing (`.ci/prepare-test`), and `.ci/run` only calls it.

The script runs for real, under bash, with the system commands it calls (`pg_isready`,
`pg_ctlcluster`, `psql`, `createdb`, `apt-get`) replaced by stubs on PATH that record their
arguments and change the stub machine's state as the real ones would: nothing is installed or
started on this machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "prepare-test"

#: Each stub logs "name args" and acts on files under $STATE: pg.up (server running), db.test
#: (database exists), apt.lists (package lists fetched), and the chromium path.
STUBS = {
    "pg_isready": '[ -e "$STATE/pg.up" ]',
    "pg_ctlcluster": 'touch "$STATE/pg.up"',
    "psql": '[ -e "$STATE/db.test" ] && echo 1; true',
    "createdb": 'touch "$STATE/db.test"',
    "apt-get": (
        'case "$*" in *update*) touch "$STATE/apt.lists";; *install*) [ -e "$STATE/apt.lists" ] || exit 100;'
        ' printf "#!/bin/sh\\n" > "$CHROMIUM_PATH"; chmod +x "$CHROMIUM_PATH";; esac'
    ),
    "sudo": '"$@"',
    "npm": (
        'mkdir -p "$AZURITE_DIR/node_modules/.bin" && printf "#!/bin/sh\\n" > "$AZURITE_DIR/node_modules/.bin/azurite-blob"'
        ' && chmod +x "$AZURITE_DIR/node_modules/.bin/azurite-blob"'
    ),
}


def machine(
    tmp_path: Path, *, pg_up: bool, db: bool, chromium: bool, lists: bool, azurite: bool = True
) -> dict[str, str]:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (tmp_path / "etc-postgresql" / "15").mkdir(parents=True)
    for name, body in STUBS.items():
        stub = bin_dir / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> "$STATE/calls"\n{body}\n')
        stub.chmod(0o755)
    chromium_path = tmp_path / "chromium"
    for flag, name in ((pg_up, "pg.up"), (db, "db.test"), (lists, "apt.lists")):
        if flag:
            (state / name).touch()
    if chromium:
        chromium_path.write_text("#!/bin/sh\n")
        chromium_path.chmod(0o755)
    azurite_dir = tmp_path / "node"
    if azurite:
        (azurite_dir / "node_modules" / ".bin").mkdir(parents=True)
        (azurite_dir / "node_modules" / ".bin" / "azurite-blob").write_text("#!/bin/sh\n")
        (azurite_dir / "node_modules" / ".bin" / "azurite-blob").chmod(0o755)
        (azurite_dir / ".azurite-version").write_text("3.37.0\n")
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "AZURITE_DIR": str(azurite_dir),
        "SEQEXPORT_AZURITE_DIR": str(azurite_dir),
        "STATE": str(state),
        "CHROMIUM_PATH": str(chromium_path),
        "SEQEXPORT_CHROMIUM": str(chromium_path),
        "SEQEXPORT_PG_CLUSTERS": str(tmp_path / "etc-postgresql"),
    }


def prepare(env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    log = Path(env["STATE"]) / "calls"
    return done, log.read_text().splitlines() if log.exists() else []


def test_on_a_fresh_machine_it_starts_postgres_creates_the_database_and_installs_chromium(tmp_path: Path) -> None:
    env = machine(tmp_path, pg_up=False, db=False, chromium=False, lists=False, azurite=False)
    done, calls = prepare(env)
    assert done.returncode == 0, done.stderr
    assert "pg_ctlcluster --skip-systemctl-redirect 15 main start" in calls
    assert "createdb -h 127.0.0.1 -p 5432 -U postgres test" in calls
    # No package lists yet: the first install fails, an update follows, then the install succeeds.
    installs = [c for c in calls if c.startswith("apt-get")]
    assert installs == ["apt-get install -y chromium", "apt-get update", "apt-get install -y chromium"]
    assert os.access(env["SEQEXPORT_CHROMIUM"], os.X_OK)
    assert "starting PostgreSQL 15" in done.stderr and "installing chromium with apt-get" in done.stderr
    # Azurite (the Azure tests' emulator) from the npm registry, pinned, into its own folder.
    assert [c for c in calls if c.startswith("npm")] == [
        f"npm install --prefix {env['AZURITE_DIR']} --no-audit --no-fund --silent azurite@3.37.0"
    ]
    assert os.access(Path(env["AZURITE_DIR"]) / "node_modules" / ".bin" / "azurite-blob", os.X_OK)


def test_with_everything_there_it_does_nothing(tmp_path: Path) -> None:
    done, calls = prepare(machine(tmp_path, pg_up=True, db=True, chromium=True, lists=True))
    assert done.returncode == 0 and done.stderr == ""
    assert [c.split()[0] for c in calls] == ["pg_isready", "psql"], "it only looks"


def test_without_a_cluster_it_says_what_to_install(tmp_path: Path) -> None:
    env = machine(tmp_path, pg_up=False, db=True, chromium=True, lists=True)
    (tmp_path / "etc-postgresql" / "15").rmdir()
    done, calls = prepare(env)
    assert done.returncode == 1 and "no cluster is configured" in done.stderr and "install postgresql" in done.stderr
    assert not [c for c in calls if not c.startswith("pg_isready")]


def test_make_test_prepares_first_and_ci_only_calls_make_test() -> None:
    # Under `make test` this runs in a sub-make: MAKELEVEL would turn on "make[1]: Entering directory".
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "-W", "pyproject.toml", "test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.splitlines()
    steps = [line.split()[0] for line in plan]
    assert steps.index("./.ci/prepare-test") < steps.index(".venv/bin/ruff") < steps.index(".venv/bin/mypy")
    # Every test, on three xdist workers: no marker, keyword or path selects a part of the suite in CI
    # (it prints the 25 slowest tests at its end).
    assert plan[-1].startswith("env -u HTTP_PROXY") and plan[-1].endswith(".venv/bin/pytest -q -n 3 --durations=25")
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert commands == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]
