"""Issue 17, item 5: progress on stderr for long work, only for a person at a terminal."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, day_of
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.cli_harness import Cli, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.world import DAY0


class TerminalStderr(io.StringIO):
    def isatty(self) -> bool:
        return True


def stderr_of(run: Cli, monkeypatch: pytest.MonkeyPatch, *argv: str, tty: bool, **kwargs: Any) -> tuple[int, str]:
    stream = TerminalStderr() if tty else io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", stream)
        result = run(*argv, **kwargs)
    return result.code, stream.getvalue()


def test_verify_and_rotate_keys_show_progress_only_at_a_terminal(
    run_sqlite: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_sqlite
    w = run.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + 8 * HOUR_MS, seed=2, scale=Scale(20, 40, 4, 6))
    eid = run.create_local("b", "--datasets", "email_events,custom_events")["id"]
    w.clock.now_ms = DAY0 + 6 * HOUR_MS + 3 * MINUTE_MS
    runner = w.runner(part_limit=7)
    for dataset in ("email_events", "custom_events"):
        runner.run_day(eid, dataset, day_of(DAY0), run_id="r1")
    parts = sorted((w.root / "b").rglob("*.jsonl.gz"))
    assert len(parts) > 4

    code, shown = stderr_of(run, monkeypatch, "verify", str(w.root / "b"), tty=True)
    assert code == 0
    assert "objects checked" in shown and f"{len(parts)}/{len(parts)}" in shown
    assert "windows checked" in shown and "2/2" in shown  # one catch-up window per dataset
    for argv, tty in (((), False), (("--json",), True)):
        code, quiet = stderr_of(run, monkeypatch, "verify", str(w.root / "b"), *argv, tty=tty)
        assert code == 0 and "checked" not in quiet and quiet == ""

    run.create_local("c")
    new_keys = f"{new_key_spec('t2')},{run.key_spec}"
    env = {**run.env, "SEQEXPORT_SECRET_KEYS": new_keys}
    code, shown = stderr_of(run, monkeypatch, "rotate-keys", tty=True, env=env)
    assert code == 0 and "secrets re-sealed" in shown and "2/2" in shown
    code, quiet = stderr_of(run, monkeypatch, "rotate-keys", "--json", tty=True, env=env)
    assert code == 0 and "secrets re-sealed" not in quiet


def test_demo_build_reports_progress(tmp_path: Any) -> None:
    from seqexport_dagster.demo.run import build_demo

    seen: list[tuple[str, int, int | None]] = []
    world = build_demo(tmp_path / "demo", now_ms=DAY0, advance=lambda *a: seen.append(a))
    world.store.engine.dispose()
    assert seen[0] == ("building demo data (accounts)", 0, 2) and seen[-1] == ("building demo data (accounts)", 2, 2)
