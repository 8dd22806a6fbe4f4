"""Batched delivery on real parts: leases, per-export deadlines, one failing or hanging export.

Real control plane and source (SQLite files, and PostgreSQL for the lease race), real moto server,
a real TCP endpoint that accepts and never answers, and a real worker process killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, chain, day_of
from seqexport_dagster.delivery.batch import BUSY, DONE, FAILED, TIMED_OUT, BatchRunner
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import LeaseLost
from seqexport_dagster.store import COMMITTED
from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster.store.lease import LEASE_TTL_MS, Leases
from seqexport_dagster_tests.support.local_bucket import bucket_rows
from seqexport_dagster_tests.support.processes import kill_group, start_group, stop_group
from seqexport_dagster_tests.support.world import DAY0, World, postgres_world

ROOT = Path(__file__).resolve().parents[1]
D0 = day_of(DAY0)


@pytest.fixture
def world(tmp_path, monkeypatch):
    spec = new_key_spec("t1")
    monkeypatch.setenv("SEQEXPORT_SECRET_KEYS", spec)
    value = World.in_files(tmp_path, DAY0, spec)
    generate_account(value.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=Scale(60, 60, 3, 5))
    try:
        yield value
    finally:
        value.dispose()


def batch_runner(world: World, holder: str, part_limit: int = 50_000, **kwargs) -> BatchRunner:
    return BatchRunner(
        lambda **kw: world.runner(part_limit=part_limit, **kw),
        world.store,
        Leases(world.store.engine),
        holder=holder,
        clock=world.clock,
        retry_delays_s=(0.1,),
        **kwargs,
    )


def lease_checks(leases: Leases) -> None:
    assert leases.claim("exp_a", "run-1", 1_000)
    assert leases.claim("exp_a", "run-1", 2_000), "the holder may claim again (extends)"
    assert not leases.claim("exp_a", "run-2", 2_000 + LEASE_TTL_MS - 1)
    assert leases.renew("exp_a", "run-1", 3_000)
    assert not leases.claim("exp_a", "run-2", 3_000 + LEASE_TTL_MS - 1), "renewed: still held"
    assert leases.held(3_000) == {"exp_a": "run-1"}
    # The holder dies (stops renewing): the lease lapses and another run takes it.
    assert leases.claim("exp_a", "run-2", 3_000 + LEASE_TTL_MS)
    assert not leases.renew("exp_a", "run-1", 3_000 + LEASE_TTL_MS), "the old holder learns it lost it"
    leases.release("exp_a", "run-1")  # not the holder: no effect
    assert leases.held(3_000 + LEASE_TTL_MS) == {"exp_a": "run-2"}
    leases.release("exp_a", "run-2")
    assert leases.held(0) == {}


def test_lease_claims_on_sqlite(world):
    lease_checks(Leases(world.store.engine))


@pytest.mark.postgres
def test_lease_claims_on_postgres_and_a_race_has_one_winner(tmp_path):
    with postgres_world(tmp_path) as pg:
        leases = Leases(pg.store.engine)
        lease_checks(leases)
        for round_ in range(5):
            winners: list[str] = []
            barrier = threading.Barrier(8)

            def claim(i: int, key: str = f"exp_race_{round_}", barrier=barrier, winners=winners) -> None:
                barrier.wait()
                if leases.claim(key, f"run-{i}", 10_000):
                    winners.append(f"run-{i}")

            threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(winners) == 1, winners


def test_an_export_whose_lease_is_held_elsewhere_is_skipped_and_a_lost_lease_stops_the_writer(world):
    export = world.local_export(datasets=("email_events",))
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 2 * MINUTE_MS
    leases = Leases(world.store.engine)
    assert leases.claim(export.id, "a-ui-launch", world.clock())
    report = batch_runner(world, "scheduled-run").run([export.id], [D0], ["email_events"], run_id="r1", rewrite=False)
    assert report.outcomes[export.id].status == BUSY
    assert world.store.ledger(export.id) == [] and not (world.root / "bucket").exists()
    # A writer whose lease was taken over stops before its next file, and it is not a failure.
    runner = batch_runner(world, "r2")
    with pytest.raises(LeaseLost):
        runner._renew(export.id)
    # A holder known to be dead (its Dagster run ended) is taken over at once, before the TTL.
    runner = batch_runner(world, "r2", holder_ended=lambda holder: holder == "a-ui-launch")
    report = runner.run([export.id], [D0], ["email_events"], run_id="r2", rewrite=False)
    assert report.outcomes[export.id].status == DONE and report.rows > 0
    assert leases.held(world.clock()) == {}, "released at the end"
    assert not leases.take_over(export.id, "a-ui-launch", "r3", world.clock()), "only from that holder"


class HangingEndpoint:
    """Accepts TCP connections (the kernel's backlog does) and never answers: a stuck store."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()


def test_one_hanging_and_one_failing_export_in_a_batch_do_not_delay_or_fail_the_others(world, moto):
    bucket = "batch-ok"
    moto.admin_client().create_bucket(Bucket=bucket)
    hanging = HangingEndpoint()

    def s3(endpoint: str, name: str, prefix: str) -> str:
        return world.store.create_export(
            account_id="acme",
            destination=DestinationConfig(
                "s3",
                name,
                prefix=prefix,
                region="us-east-1",
                endpoint=endpoint,
                access_key_id="AKIAB",
                secret_access_key="s",
            ),
            datasets=("email_events", "sms_events"),
            frequency="1h",
            lag_ms=2 * MINUTE_MS,
            now_ms=DAY0,
        ).id

    healthy = [s3(moto.endpoint, bucket, f"p{i}") for i in range(6)]
    stuck = s3(hanging.url, "stuck", "x")
    blocked = world.root / "blocked"
    blocked.write_text("a file where the bucket folder should be")
    failing = world.local_export(datasets=("email_events", "sms_events"), folder="blocked").id
    world.clock.now_ms = DAY0 + 6 * HOUR_MS + 2 * MINUTE_MS
    ids = [stuck, failing, *healthy]
    runner = batch_runner(world, "run-1", workers=4, deadline_s=4.0)
    try:
        started = time.monotonic()
        report = runner.run(ids, [D0], ["email_events", "sms_events"], run_id="run-1", rewrite=False)
        elapsed = time.monotonic() - started
        assert elapsed < 4.0 + 3.0, f"the batch waited {elapsed:.1f} s for its stuck export"
        assert [report.outcomes[e].status for e in healthy] == [DONE] * 6
        assert report.outcomes[stuck].status == TIMED_OUT
        assert report.outcomes[failing].status == FAILED
        for export_id in healthy:
            state = world.store.get_export(export_id)
            assert all(s.position_ms == DAY0 + 6 * HOUR_MS and s.failures == 0 for s in state.datasets)
        # Both problems are the exports' own: recorded for backoff, with a readable last error.
        stuck_state = world.store.get_export(stuck).dataset_state("email_events")
        assert stuck_state.failures == 1 and "did not finish within 4 s" in stuck_state.last_error
        assert stuck_state.next_retry_at == world.clock() + HOUR_MS
        failing_states = world.store.get_export(failing).datasets
        assert all(s.failures == 1 and "cannot write" in s.last_error for s in failing_states)
        # The stuck export's lease is revoked: its thread stops before any further file.
        with pytest.raises(LeaseLost):
            runner._renew(stuck)
    finally:
        hanging.close()
        for thread in [t for t in threading.enumerate() if t.name == "seqexport-batch"]:
            thread.join(timeout=90)


def test_a_sigkilled_worker_holding_20_exports_loses_nothing_and_duplicates_nothing(world):
    exports = [world.local_export(datasets=("email_events",), folder=f"b{i:02d}").id for i in range(20)]
    now = DAY0 + 8 * HOUR_MS + 2 * MINUTE_MS
    world.clock.now_ms = now
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = start_group(
        [sys.executable, "-m", "seqexport_dagster_tests.support.batch_worker", world.control_url, world.source_url,
         D0.isoformat(), str(now), "killed-run", *exports],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"started"
        leases = Leases(world.store.engine)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            parts = sum(1 for _ in world.root.rglob("*.jsonl.gz"))
            if len(leases.held(now)) == 20 and parts >= 20:
                break
            time.sleep(0.05)
        assert len(leases.held(now)) == 20, "the worker holds all 20 leases"
        kill_group(worker)
        worker.wait(timeout=10)
    finally:
        stop_group(worker)
    assert worker.returncode == -signal.SIGKILL
    committed_before = {e: world.store.get_export(e).dataset_state("email_events").position_ms for e in exports}
    assert any(p < now - 2 * MINUTE_MS for p in committed_before.values()), "killed mid-work"

    # Before the leases lapse, another run writes nothing for these exports.
    report = batch_runner(world, "second-run", part_limit=5).run(
        exports, [D0], ["email_events"], run_id="r2", rewrite=False
    )
    assert {o.status for o in report.outcomes.values()} == {BUSY}
    # After the TTL the dead worker's leases have lapsed: the work completes, once.
    world.clock.now_ms = now + LEASE_TTL_MS
    report = batch_runner(world, "third-run", part_limit=5).run(
        exports, [D0], ["email_events"], run_id="r3", rewrite=False
    )
    assert {o.status for o in report.outcomes.values()} == {DONE}
    for i, export_id in enumerate(exports):
        state = world.store.get_export(export_id).dataset_state("email_events")
        assert state.position_ms == DAY0 + 8 * HOUR_MS
        committed = sorted({w.window for w in world.store.ledger(export_id) if w.status == COMMITTED})
        assert committed[0].from_ms == DAY0 and all(
            a.to_ms == b.from_ms for a, b in zip(committed, committed[1:], strict=False)
        )
        ids = [r["id"] for r in bucket_rows(world.root / f"b{i:02d}", "email_events")]
        assert len(ids) == len(set(ids)), "a row appears twice"
        expected = sum(world.source.count_window("email_events", "acme", w) for w in chain(DAY0, DAY0 + 8 * HOUR_MS))
        assert len(ids) == expected, "a row is missing"


def test_queued_work_of_a_paused_or_deleted_export_ends_without_touching_its_bucket(world):
    paused = world.local_export(datasets=("email_events",), folder="paused")
    deleted = world.local_export(datasets=("email_events",), folder="deleted")
    active = world.local_export(datasets=("email_events",), folder="active")
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + 2 * MINUTE_MS
    world.store.set_status(paused.id, "paused", world.clock())
    world.store.set_status(deleted.id, "deleted", world.clock())
    ids = [paused.id, deleted.id, active.id, "exp_gone"]
    report = batch_runner(world, "r1").run(ids, [D0], ["email_events"], run_id="r1", rewrite=True)
    assert [report.outcomes[e].status for e in ids] == ["inactive", "inactive", DONE, "inactive"]
    assert world.store.ledger(paused.id) == [] and world.store.ledger(deleted.id) == []
    assert not (world.root / "paused").exists() and not (world.root / "deleted").exists()
    assert Leases(world.store.engine).held(0) == {}
