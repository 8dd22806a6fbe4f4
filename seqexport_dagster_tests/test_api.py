"""The Python API (`seqexport_dagster.management.api.Exports`) with a real runner writing real files."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, day_of, iso_ms
from seqexport_dagster.delivery.connection_test import ConnectionTestFailed, run_connection_test
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.local import LocalDestination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import AccessDenied, ConflictError, InvalidInput, NotFound, RunInterrupted
from seqexport_dagster.management.api import Exports, mask_key_id
from seqexport_dagster_tests.support.cli_harness import control_plane_rows, files_under
from seqexport_dagster_tests.support.world import DAY0, World

SCALE = Scale(subscribers=30, email_sends_per_hour=40, sms_sends_per_hour=2, custom_per_hour=2)


def exports_of(world: World, **kwargs: object) -> Exports:
    return Exports(world.store, world.policy, clock=world.clock, **kwargs)  # type: ignore[arg-type]


class Refusing:
    def __init__(self, config: DestinationConfig, policy: OperatorPolicy) -> None:
        self.config = config

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        raise AccessDenied(f"access denied for s3:PutObject on {self.config.bucket}/{key}")

    def describe(self) -> str:
        return self.config.describe()

    def close(self) -> None:
        return None


class Hooked:
    """A local folder that runs ``hook`` after its first write: a CLI call landing mid-run."""

    def __init__(self, config: DestinationConfig, hook: Callable[[], None]) -> None:
        self.inner = LocalDestination(config.bucket)
        self.hook = hook
        self.writes = 0

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        outcome = self.inner.put(key, body, create_only=create_only)
        self.writes += 1
        if self.writes == 1:
            self.hook()
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        return None


def test_create_tests_first_and_saves_nothing_on_failure(world: World) -> None:
    api = exports_of(world, destination_factory=Refusing)
    empty = control_plane_rows(world.control_engine)
    asked: list[str] = []

    def prompt() -> str:
        asked.append("asked")
        return "the-secret"

    with pytest.raises(InvalidInput) as bad:
        api.create(account_id="acme", provider="s3", bucket="x", region="us-east-1", datasets="email_events",
                   access_key_id="AKIAEXAMPLE000000001", secret_access_key=prompt)  # fmt: skip
    assert bad.value.field == "bucket" and asked == []  # nobody types a secret for a doomed request
    with pytest.raises(ConnectionTestFailed) as failed:
        api.create(account_id="acme", provider="s3", bucket="acme-exports", prefix="sequenzy", region="us-east-1",
                   datasets=["email_events"], access_key_id="AKIAEXAMPLE000000001", secret_access_key=prompt)  # fmt: skip
    assert asked == ["asked"]
    message = str(failed.value)
    assert message.startswith("connection test to s3://acme-exports/sequenzy failed: access denied for s3:PutObject")
    assert "acme-exports/sequenzy/_sequenzy/connection-test-" in message and message.endswith("nothing was saved")
    assert "the-secret" not in message and isinstance(failed.value.cause, AccessDenied)
    assert control_plane_rows(world.control_engine) == empty


def test_connection_test_file(tmp_path: Path) -> None:
    config = DestinationConfig("local", str(tmp_path), prefix="team/sequenzy")
    result = run_connection_test(config, OperatorPolicy(allow_local=True), now_ms=DAY0, token="abc123")
    assert result.key == "team/sequenzy/_sequenzy/connection-test-abc123.txt"
    text = (tmp_path / result.key).read_text()
    assert f"Written at {iso_ms(DAY0)}" in text
    assert "safe to delete" in text and files_under(tmp_path) == [result.key]
    other = run_connection_test(config, OperatorPolicy(allow_local=True), now_ms=DAY0)
    assert other.key != result.key  # random tokens: two tests never overwrite each other


def test_pause_mid_run_then_resume_without_gap(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=11, scale=SCALE)
    api = exports_of(world)
    exp = api.create(account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events")
    world.clock.advance(6 * HOUR_MS + 2 * MINUTE_MS)
    runner = world.runner(part_limit=20, destination_factory=lambda c, p: Hooked(c, lambda: api.pause(exp.id)))
    with pytest.raises(RunInterrupted):
        runner.run_day(exp.id, "email_events", day_of(DAY0))
    status = api.status(exp.id)
    assert status.export.status == "paused" and status.datasets[0].position_ms == DAY0
    assert status.last_error is None  # a pause is not a failure
    world.clock.advance(3 * HOUR_MS)
    api.resume(exp.id)
    world.runner(part_limit=20).run_day(exp.id, "email_events", day_of(DAY0))
    windows = sorted(w.window for w in world.store.ledger(exp.id) if w.status == "committed")
    assert windows[0].from_ms == DAY0 and windows[-1].to_ms == DAY0 + 9 * HOUR_MS
    assert all(a.to_ms == b.from_ms for a, b in zip(windows, windows[1:], strict=False))
    assert api.status(exp.id).datasets[0].behind_ms == 2 * MINUTE_MS


def test_destination_change_mid_window_restarts_it_at_the_new_place(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=12, scale=SCALE)
    api = exports_of(world)
    b1, b2 = world.root / "b1", world.root / "b2"
    exp = api.create(account_id="acme", provider="local", bucket=str(b1), prefix="p", datasets="email_events",
                     frequency="24h")  # fmt: skip
    world.clock.advance(DAY_MS + 2 * MINUTE_MS)
    factory_calls: list[str] = []

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        factory_calls.append(config.bucket)
        if len(factory_calls) == 1:
            return Hooked(config, lambda: api.change_destination(exp.id, bucket=str(b2), prefix="q"))
        return LocalDestination(config.bucket)

    report = world.runner(part_limit=25, destination_factory=factory).write_window(
        exp.id, "email_events", Window(DAY0, DAY0 + DAY_MS)
    )
    assert factory_calls == [str(b1), str(b2)] and report.restarts == 1 and report.parts > 2
    moved = [f for f in files_under(b2) if f.startswith("q/email_events/")]
    assert len(moved) == report.parts
    lines = sum(len(gzip.decompress((b2 / f).read_bytes()).splitlines()) for f in moved)
    assert lines == report.rows
    assert [f for f in files_under(b1) if "email_events" in f] == [f"p/email_events/date={report.window.date_key}/"
                                                                   f"email_events-{DAY0}-{DAY0 + DAY_MS}-0000.jsonl.gz"]  # fmt: skip
    assert api.get(exp.id).destination_version == exp.destination_version + 1
    assert api.status(exp.id).datasets[0].position_ms == DAY0 + DAY_MS


def test_state_rules(world: World) -> None:
    api = exports_of(world)
    exp = api.create(
        account_id="acme", provider="local", bucket=str(world.root / "b"), datasets=["subscribers", "email_events"]
    )
    assert [d.dataset for d in exp.datasets] == ["email_events", "subscribers"]
    with pytest.raises(NotFound):
        api.status("exp_ffffffffffffffff")
    with pytest.raises(InvalidInput):
        api.add_datasets(exp.id, "clicks")
    with pytest.raises(ConflictError, match="already exports email_events"):
        api.add_datasets(exp.id, ["email_events"])
    with pytest.raises(InvalidInput, match="nothing to change"):
        api.change_destination(exp.id)
    with pytest.raises(InvalidInput, match="needs its secret"):
        api.change_destination(exp.id, provider="s3", bucket="acme-exports", region="us-east-1", access_key_id="AKIA1")
    api.pause(exp.id)
    with pytest.raises(ConflictError, match="resume it first"):
        api.export_now(exp.id)
    snapshot = api.status(exp.id).datasets[1]
    assert snapshot.position_ms == DAY0 and snapshot.behind_ms is None and snapshot.snapshot_late_ms == 0
    deleted = api.delete(exp.id)
    assert deleted.status == "deleted" and api.history(exp.id) == []
    for action in (api.pause, api.resume, api.export_now, api.delete):
        with pytest.raises(ConflictError, match="is (already )?deleted"):
            action(exp.id)
    assert api.list() == [] and [e.id for e in api.list(include_deleted=True)] == [exp.id]


def test_mask_key_id() -> None:
    assert mask_key_id("AKIAIOSFODNN7EXAMPLE") == "AKIA************MPLE"
    assert mask_key_id("short") == "*****"
    assert mask_key_id(None) is None


def test_delete_mid_run_stops_before_the_next_file(world: World) -> None:
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, seed=13, scale=SCALE)
    api = exports_of(world)
    exp = api.create(account_id="acme", provider="local", bucket=str(world.root / "b"), datasets="email_events")
    world.clock.advance(6 * HOUR_MS + 2 * MINUTE_MS)
    hooked: list[Hooked] = []

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        hooked.append(Hooked(config, lambda: api.delete(exp.id)))
        return hooked[-1]

    with pytest.raises(RunInterrupted, match="is deleted"):
        world.runner(part_limit=20, destination_factory=factory).run_day(exp.id, "email_events", day_of(DAY0))
    assert [h.writes for h in hooked] == [1]  # the file in flight landed; no other file followed
    parts = [f for f in files_under(world.root / "b") if f.startswith("email_events/")]
    assert len(parts) == 1  # files already written stay in the bucket
    status = api.status(exp.id)
    assert status.export.status == "deleted" and status.datasets[0].position_ms == DAY0
    assert [r.status for r in api.history(exp.id)] == ["canceled"]
