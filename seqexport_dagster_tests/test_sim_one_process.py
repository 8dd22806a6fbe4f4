"""Seeds run one after another in one process, as a pytest-xdist worker runs the CI seeds, run the
history each runs alone in a fresh process: nothing one world leaves in the process (the prepared
statements' plans shared by engines alike, the template databases, module caches) changes the next.

The CI seed 3 that failed in a worker of a clean-clone ``pytest -n 3`` (2026-12-06) was compared with
a run of its printed reproducing command, which ran another world (no ``--wide 0``: `run._command`
now prints it); `history_digest` compares two runs of a seed send by send.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from seqexport_dagster_tests.support.sim import __main__ as cli
from seqexport_dagster_tests.support.sim.run import SimResult, simulate

pytestmark = pytest.mark.slow

#: Short seeds of the CI set (`test_simulation.CI_SEEDS`) in their CI worlds: 5 and 2 (crashes,
#: Parquet, Delta tables) with the older seeds' world, 9 with deletes.
WORLDS: tuple[tuple[int, dict[str, object]], ...] = (
    (5, {"more": ("change format",)}),
    (2, {"more": ("change format",)}),
    (9, {}),
)
_ROOT = Path(__file__).resolve().parent.parent


def _alone(seed: int, world_kw: dict[str, object]) -> subprocess.Popen[str]:
    code = (
        "from seqexport_dagster_tests.support.sim.run import simulate\n"
        f"print(simulate({seed}, days=1.5, **{world_kw!r}).history)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], cwd=_ROOT, env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.xfail(
    strict=False,
    reason=(
        "open finding (clean-clone CI of 953d577, 2026-12-06, host loaded): seed 9 ran another history "
        "in its xdist worker (digest 34777fc2) than alone in a subprocess run beside it (7600bb87); it "
        "passed in every quiet run. Suspect: which control-plane call draws which fault follows thread "
        "scheduling (the batch runner's watcher thread beside its worker). docs/operators.md, CI seed 3."
    ),
)
def test_seeds_in_one_process_run_the_histories_they_run_alone() -> None:
    alone = {seed: _alone(seed, kw) for seed, kw in WORLDS[1:]}
    histories = {seed: simulate(seed, days=1.5, **kw).history for seed, kw in WORLDS}  # type: ignore[arg-type]
    for seed, process in alone.items():
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0
        assert histories[seed] == out.strip(), f"seed {seed} ran another history after the seeds before it"
    assert len(set(histories.values())) == len(WORLDS)  # three worlds, three histories


def test_a_failing_seeds_command_runs_the_world_it_failed_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command a failing seed prints runs its history. A CI seed runs `World`'s first world (no
    ``wide``), and the command line's default is the widened one: the command now says ``--wide 0``."""
    ran: list[str] = []

    def run(seed: int, **kw: object) -> SimResult:
        ran.append(simulate(seed, **kw).history)  # type: ignore[arg-type]
        return SimResult(seed, 0.0)

    monkeypatch.setattr(cli, "simulate", run)
    for world_kw in ({}, {"more": ("change format",)}, {"wide": 1}):
        result = simulate(9, days=0.3, **world_kw)  # type: ignore[arg-type]
        ran.clear()
        cli.main(shlex.split(result.command.partition("python -m seqexport_dagster_tests.support.sim")[2]))
        assert ran == [result.history], (world_kw, result.command)
