"""Shared fixtures, and how the suite runs under pytest-xdist."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from seqexport_dagster_tests.support import moto_server


def pytest_configure(config: pytest.Config) -> None:
    """Scratch files in memory (``/dev/shm``) when the host has it and ``TMPDIR`` is not set: the
    tests' SQLite files, Dagster instances and buckets on disk paid an fsync per commit (Dagster's
    storage commits every event), several times their CPU time on a busy disk. Set before the
    first temporary path and inherited by every process the tests start (servers, daemons, xdist
    workers). Nothing the tests assert depends on where these files live."""
    shm = Path("/dev/shm")
    if not os.environ.get("TMPDIR") and shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        os.environ["TMPDIR"] = str(shm)
        tempfile.tempdir = None  # gettempdir() caches its first answer


#: Tests (``file::function``, every parameter) that under pytest-xdist may each run on any worker:
#: the simulator's seeds, independent and together too long for one worker. Every other test runs
#: on the worker of its file (`scope_of`).
SPREAD: Final = frozenset(
    {
        "test_simulation.py::test_regression_seed",
        "test_simulation.py::test_seed_with_maintenance_every_hour_holds_every_invariant",
        "test_simulation.py::test_a_seed_on_postgresql",
        "test_simulation.py::test_a_format_leaves_a_seeds_history_as_it_was",
        "test_simulation.py::test_a_seed_is_reproducible",
    }
)

#: Seconds each heavy unit of work (a file, a `GROUPS` group, or each test of a `SPREAD` function)
#: took on one worker: they start first, so that the last to start are short. Anything not listed
#: starts after these and runs the same. Only the order matters, and a unit much heavier than its
#: entry that starts late is what keeps one worker busy while the other has finished.
#: Measured 2026-12-06 (branch `suite`, one process, ``--junitxml``/``--durations``, load 9-15 on the
#: 2-core host, as the table before it at load 5-13): the files marked *, less what this branch took
#: out of them (the simulator's verify memo, test_retention's text test); the rest as measured at
#: bfe50bc. test_browser_ui: 134 s on a quiet host (issue 40's notes).
WEIGHT: Final[dict[str, float]] = {
    "test_simulation.py": 260,  # * the CI seeds and the oracles' own tests (300 before the memo)
    "test_benchmarks_smoke.py": 180,  # * 323 before tests40 (peers kept, no fixed 5 s waits): 344 -> 191 s at load 8-14
    "test_simulation.py::wide seeds": 150,  # * (178 before the memo)
    "test_browser_ui.py": 134,
    "test_dagster_e2e.py": 126,  # *
    "test_make_dev.py": 110,  # *
    "test_late_rows_holes.py": 106,  # *
    "test_verify_bounds.py": 100,  # * 111 before tests40 (the bombs built in 0.3 s, not 3)
    "test_simulation.py::test_a_seed_is_reproducible": 95,  # * 73 and 117 in two runs
    "test_simulation_budget.py": 95,  # *
    "test_retention.py": 92,  # * (98 before)
    "test_faults.py": 85,  # * 117 before tests40 (one boto3 session for the moto clients): 62 -> 44 CPU-s
    "test_write_once_dagster.py": 85,  # * 100 before tests40 (in-run retry delays not slept)
    "test_simulation.py::test_a_seed_on_postgresql": 80,  # * 31 and 130: the shared PostgreSQL server
    "test_store.py": 78,  # *
    "test_azure.py": 26,  # one Azurite (about 4 s to start), a day through it, DuckDB in a subprocess
    "test_reconcile_dagster.py": 52,
    "test_hot_path_indexes.py": 48,
    "test_webhooks.py": 46,
    "test_daemon_restart.py": 45,
    "test_hostile_endpoint.py": 45,
    "test_cli.py": 41,
    "test_simulation.py::test_seed_with_maintenance_every_hour_holds_every_invariant": 40,
    "test_day_cells.py": 40,
    "test_sensor.py": 37,
    "test_http_hostile.py": 37,
    "test_role.py": 33,
    "test_runner.py": 32,
    "test_webhooks_interfaces.py": 30,
    "test_http_service.py": 30,
    "test_simulation.py::test_regression_seed": 23,  # each of 38, 5 to 146 s
    "test_simulation.py::test_a_format_leaves_a_seeds_history_as_it_was": 19,
}


#: Tests (``file::function``, every parameter) that form a unit of work of their own, apart from
#: the rest of their file: a group's tests share what they compute (each seed's result, cached in
#: the worker), so they stay together, in the file's order. The wide CI seeds and the test of what
#: they cover together are a quarter of the simulator's CI time: one worker runs them while the other
#: runs the CI seeds.
GROUPS: Final = {
    "test_simulation.py::test_wide_ci_seed_holds_every_invariant": "wide seeds",
    "test_simulation.py::test_wide_ci_seeds_cover_the_widened_world": "wide seeds",
}


def scope_of(nodeid: str) -> str:
    """The unit of work a worker takes whole: the test's file, the test itself if in `SPREAD`, or
    its file's group if in `GROUPS`.

    A file's tests run together, in order, on one worker: module-scoped fixtures (servers, loaded
    databases) start once, and a new test file needs nothing to run under xdist."""
    key = _weight_key(nodeid)
    if key in SPREAD:
        return nodeid
    path = nodeid.partition("::")[0]
    return f"{path}::({key.partition('::')[2]})" if "::" in key else path


def _weight_key(nodeid: str) -> str:
    """``file::function`` for a test in `SPREAD`, ``file::group`` for one in `GROUPS`, else its
    file's name: its key in `WEIGHT`."""
    path, _, rest = nodeid.partition("::")
    test = f"{Path(path).name}::{rest.split('[', 1)[0]}"
    if test in SPREAD:
        return test
    if test in GROUPS:
        return f"{Path(path).name}::{GROUPS[test]}"
    return Path(path).name


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` runs ``-n 3`` with ``--dist loadgroup`` (pyproject's addopts), scheduled by
    `scope_of`. Not xdist's own loadgroup: it groups by renaming each test's node id, which pytest 9
    no longer lets a plugin do (the id is ``Node._id``), so every test ended up on its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return FileScheduling(config, log)


#: A unit of work heavier than this (in `WEIGHT`) is `slow` too: `make test-fast` leaves it out.
SLOW_WEIGHT: Final = 50.0


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heaviest units of work first (`WEIGHT`); a file keeps its own order. Every worker sorts
    alike, and the scheduler hands out work in this order (``--no-loadscope-reorder``)."""
    for item in items:
        if WEIGHT.get(_weight_key(item.nodeid), 0.0) >= SLOW_WEIGHT:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -WEIGHT.get(_weight_key(item.nodeid), 0.0))


@pytest.fixture(scope="session")
def moto() -> Iterator[moto_server.MotoServer]:
    """A permissive moto server (no auth) shared by the whole session; use unique bucket names."""
    server = moto_server.start(iam=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def iam_moto() -> Iterator[moto_server.MotoServer]:
    """A fresh moto server of your own: set it up with auth off, then call ``enforce_auth()``."""
    server = moto_server.start(iam=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    """Control plane + source on SQLite in tmp_path, a frozen clock at 2026-09-30T00:00Z."""
    from seqexport_dagster_tests.support.world import sqlite_world

    with sqlite_world(tmp_path) as w:
        yield w


@pytest.fixture
def pg_world(tmp_path):  # type: ignore[no-untyped-def]
    """The same world with both databases on the real PostgreSQL server (fresh databases)."""
    from seqexport_dagster_tests.support.world import postgres_world

    with postgres_world(tmp_path) as w:
        yield w
