"""A hostile customer endpoint on 127.0.0.1 (the operator's local mode) cannot hurt a run worker.

It answers a PUT with 400 MB, drips its answer one byte a second, or returns a 5 MB error (and a
3 KB one) full of control characters. Each PUT still ends within its deadline, the worker's peak
RSS stays far below 150 MB, and the error the customer sees (`last_error`, ledger, CLI) is one
printable line of at most 1 KB.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqexport_dagster.errors import ERROR_TEXT_LIMIT
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support.cli_harness import Cli, env_for
from seqexport_dagster_tests.support.hostile_server import HostileServer, running
from seqexport_dagster_tests.support.processes import ROOT, run_in_group
from seqexport_dagster_tests.support.world import DAY0, World

DEADLINE_S = 3.0
#: botocore's backoff between attempts of a quickly failing PUT, and process start-up slack.
SLACK_S = 4.0
SECRET = "hostile/Secret+Key0123456789abcdefghijkl"
HOUR_MS = 3_600_000

# mode -> (error type the worker reports, a phrase of the customer's message)
MODES = {
    "huge": ("ResponseTooLarge", "with more than 16 KB"),
    "drip": ("EndpointTooSlow", f"within {DEADLINE_S:g} s"),
    "bigerror": ("ResponseTooLarge", "with more than 16 KB"),
    "ctlerror": ("DestinationError", "HostileError: line one line two 31mred 0m evil sep nel line one"),
}


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[HostileServer]:
    with running(tmp_path) as server:
        yield server


def assert_safe_text(text: str) -> None:
    assert len(text.encode()) <= ERROR_TEXT_LIMIT, len(text.encode())
    assert text.isprintable(), repr(text[:200])
    assert SECRET not in text


def test_hostile_endpoint_is_bounded_in_time_memory_and_words(
    tmp_path: Path,
    hostile: HostileServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, set_mode = hostile.endpoint, hostile.set_mode
    spec = new_key_spec("t1")
    world = World.in_files(tmp_path, DAY0, spec)
    env = env_for(world, spec) | {"SEQEXPORT_PUT_DEADLINE_SECONDS": str(DEADLINE_S)}
    cli = Cli(world, env, spec, capsys, monkeypatch)
    try:
        created = cli.ok(
            "create",
            "--account",
            "acme",
            "--provider",
            "s3",
            "--endpoint",
            endpoint,
            "--bucket",
            "hostile-bucket",
            "--access-key-id",
            "AKIAHOSTILE",
            "--secret-stdin",
            "--datasets",
            "email_events",
            stdin=SECRET + "\n",
        )
        export_id = created["id"]
        worker_env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
        worker_env |= env | {"PYTHONPATH": str(ROOT)}

        def worker() -> dict[str, object]:
            done = run_in_group(
                [
                    sys.executable,
                    "-m",
                    "seqexport_dagster_tests.support.hostile_worker",
                    export_id,
                    "email_events",
                    "2026-09-30",
                    str(DAY0 + 3 * HOUR_MS),
                ],
                env=worker_env,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

        figures: dict[str, dict[str, object]] = {}
        for mode, (error_type, phrase) in MODES.items():
            set_mode(mode)
            # The connection test of a destination change, through the CLI: bounded, and says why.
            started = time.monotonic()
            changed = cli("destination", export_id, "--prefix", f"moved-{mode}", "--json")
            assert changed.code == 5, changed
            assert time.monotonic() - started < DEADLINE_S + SLACK_S
            message = changed.json["error"]["message"]
            assert_safe_text(message)
            assert phrase in message, message

            # A run worker in its own process writing to it.
            result = worker()
            figures[mode] = result
            assert result["error"] == error_type, (mode, result)
            assert float(result["seconds"]) < DEADLINE_S + SLACK_S, (mode, result)  # type: ignore[arg-type]
            assert float(result["peak_rss_mb"]) < 150, (mode, result)  # type: ignore[arg-type]

            # What the customer sees: control plane, ledger, `status` and `history`, JSON and text.
            state = world.store.get_export(export_id).dataset_state("email_events")
            assert state is not None and state.last_error is not None
            assert_safe_text(state.last_error)
            assert phrase in state.last_error, state.last_error
            ledger = world.store.ledger(export_id)
            assert ledger[-1].status == "failed" and ledger[-1].error is not None
            assert_safe_text(ledger[-1].error)
            status = cli.ok("status", export_id)
            assert_safe_text(status["last_error"]["message"])
            text = cli("status", export_id)
            assert text.code == 0 and "\x1b" not in text.out and "\u202e" not in text.out
            [message_line] = [line for line in text.out.splitlines() if line.lstrip().startswith("message ")]
            assert_safe_text(message_line.split("message", 1)[1].strip())
            for run in cli.ok("history", export_id):
                if run["error"]:
                    assert_safe_text(run["error"])
        set_mode("ok")
        baseline = worker()
        assert baseline["error"] is None
    finally:
        world.dispose()


def test_dagster_event_log_gets_one_bounded_line_and_a_drip_ends_in_time(
    tmp_path: Path, hostile: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real Dagster instance: what the run logs about the failing export is the sanitised
    message, no event carries the store's control characters, and a store that drips its answer
    costs the run one deadline."""
    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster_tests.support.dagster_harness import harness

    monkeypatch.setenv("SEQEXPORT_PUT_DEADLINE_SECONDS", str(DEADLINE_S))
    with harness(tmp_path, monkeypatch, now_ms=DAY0) as h:
        export = h.world.store.create_export(
            account_id="acme",
            destination=DestinationConfig(
                "s3",
                "hostile-bucket",
                region="us-east-1",
                endpoint=hostile.endpoint,
                access_key_id="AKIAHOSTILE",
                secret_access_key=SECRET,
            ),
            datasets=("email_events",),
            frequency="1h",
            lag_ms=120_000,
            now_ms=DAY0,
        )
        h.world.clock.now_ms = DAY0 + 3 * HOUR_MS
        for mode in ("ctlerror", "drip"):
            hostile.set_mode(mode)
            started = time.monotonic()
            result = h.run([export.id], "2026-09-30", ["email_events"])
            elapsed = time.monotonic() - started
            events = h.instance.all_logs(result.run_id)
            texts = [
                e.user_message + (str(e.dagster_event.event_specific_data) if e.dagster_event else "") for e in events
            ]
            for text in texts:
                assert not any(ch in text for ch in ("\x9b", "\u202e", "\u2028", "\x85")), (mode, text[:300])
                assert SECRET not in text
            phrase = MODES[mode][1]
            # The run's own line about the dataset's failures, naming the export (asset-check
            # descriptions quote it inside Dagster's words).
            mentions = [
                e.user_message
                for e in events
                if e.user_message.startswith("email_events: ")
                and f"failed: {export.id} (account acme): " in e.user_message
            ]
            assert mentions and all(phrase in m for m in mentions), (mode, [e.user_message[:200] for e in events])
            for message in mentions:
                assert_safe_text(message)
            state = h.world.store.get_export(export.id).dataset_state("email_events")
            assert state is not None and state.last_error is not None and phrase in state.last_error
            assert_safe_text(state.last_error)
            if mode == "drip":
                assert elapsed < 30, elapsed  # one deadline (3 s) plus Dagster's own run overhead


@pytest.mark.parametrize("mode", ["drip", "dripbody", "stall", "huge", "bigerror"])
def test_each_put_ends_within_its_deadline(hostile: HostileServer, mode: str) -> None:
    """The destination itself, every attempt included: one deadline, whatever phase the store holds."""
    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster.destination.policy import OperatorPolicy
    from seqexport_dagster.destination.s3 import S3Destination
    from seqexport_dagster.errors import EndpointTooSlow, ResponseTooLarge

    hostile.set_mode(mode)
    config = DestinationConfig(
        "s3", "hostile-bucket", "p", "us-east-1", hostile.endpoint, "AKIAHOSTILE", secret_access_key=SECRET
    )
    destination = S3Destination(config, OperatorPolicy(allow_local=True), deadline_s=2.0, read_timeout=60.0)
    started = time.monotonic()
    try:
        with pytest.raises((EndpointTooSlow, ResponseTooLarge)) as info:
            destination.put("p/x.txt", b"body")
    finally:
        destination.close()
    elapsed = time.monotonic() - started
    expected = ResponseTooLarge if mode in ("huge", "bigerror") else EndpointTooSlow
    assert type(info.value) is expected and not info.value.retryable
    assert elapsed < 2.0 + 1.0, elapsed  # neither retried nor drained


def test_a_slow_name_lookup_is_inside_the_deadline() -> None:
    """The customer's DNS answering slowly (on purpose) does not stretch the PUT either."""
    from seqexport_dagster.destination.config import DestinationConfig
    from seqexport_dagster.destination.policy import OperatorPolicy
    from seqexport_dagster.destination.s3 import S3Destination
    from seqexport_dagster.errors import EndpointTooSlow

    def slow_dns(host: str, port: int) -> list[str]:
        time.sleep(10)
        return ["93.184.215.14"]

    config = DestinationConfig(
        "s3", "hostile-bucket", "p", "auto", "https://slow-dns.example.com", "AKIAHOSTILE", secret_access_key=SECRET
    )
    destination = S3Destination(config, OperatorPolicy(), resolver=slow_dns, deadline_s=1.5)
    started = time.monotonic()
    try:
        with pytest.raises(EndpointTooSlow, match="within 1.5 s"):
            destination.put("p/x.txt", b"body")
    finally:
        destination.close()
    assert time.monotonic() - started < 1.5 + 1.0
