"""Least privilege over a whole day: the customer docs' PutObject-only key is all the exporter needs.

moto runs in IAM-enforcing mode, so any call the exporter made besides ``s3:PutObject`` on
``<bucket>/<prefix>/*`` (a List to find stale parts, a Delete to remove them, a Get or Head to
check what landed) would be refused and fail the day. The key creates the export
(connection test file), writes every window of all four datasets for one full day plus the
snapshot's ``_SUCCESS``, survives a failed attempt whose rows mostly vanish before the retry (the
retry resumes after the parts that landed, with create-only PUTs whose precondition needs no right
beyond ``s3:PutObject``, and never sends a name twice), and the bucket, read back with a separate
full-rights key, holds every row exactly once with an unbroken chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from botocore.exceptions import ClientError

from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window, day_of, iso_ms
from seqexport_dagster.delivery.connection_test import ConnectionTestFailed
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import AccessDenied, RetryableError
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store import COMMITTED
from seqexport_dagster_tests.support.bucket_audit import audit_export, read_objects
from seqexport_dagster_tests.support.moto_server import MotoServer, make_user, policy, put_only_user
from seqexport_dagster_tests.support.world import ALL_DATASETS, DAY0, World

BUCKET = "acme-exports"
PREFIX = "sequenzy"
LAG = 120_000
PART_LIMIT = 10
SCALE = Scale(subscribers=80, email_sends_per_hour=12, sms_sends_per_hour=4, custom_per_hour=6)
#: The window that fails once (email_events, 10:00-11:00) and how many PUTs land before it fails.
FLAKY_HOUR = 10
LANDED_BEFORE_FAILURE = 2


def denied(call: Callable[[], object]) -> str:
    with pytest.raises(ClientError) as info:
        call()
    return str(info.value.response["Error"]["Code"])


def delete_most_rows(world: World, window: Window) -> int:
    """Delete all but ``PART_LIMIT // 2`` email events of ``window`` (say, an account merge)."""
    bounds = {"a": iso_ms(window.from_ms), "b": iso_ms(window.to_ms)}
    with world.source_engine.begin() as conn:
        ids = (
            conn.execute(
                sa.text(
                    "SELECT id FROM email_events WHERE account_id = 'acme' AND recorded_at > :a"
                    " AND recorded_at <= :b ORDER BY recorded_at, id"
                ),
                bounds,
            )
            .scalars()
            .all()
        )
        doomed = ids[: len(ids) - PART_LIMIT // 2]
        conn.execute(
            sa.text("DELETE FROM email_events WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": doomed},
        )
    return len(doomed)


class FailsOnce:
    """The real S3 destination; the first attempt at the flaky window loses its connection after
    ``LANDED_BEFORE_FAILURE`` parts landed (the way a reset mid-window does)."""

    def __init__(self) -> None:
        self.puts: list[str] = []
        self.failed = False

    def __call__(self, config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return _Flaky(open_destination(config, policy), self)


class _Flaky:
    def __init__(self, inner: Destination, plan: FailsOnce) -> None:
        self.inner, self.plan = inner, plan

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        flaky = f"email_events-{DAY0 + FLAKY_HOUR * HOUR_MS}-"
        landed = [k for k in self.plan.puts if flaky in k]
        if flaky in key and not self.plan.failed and len(landed) == LANDED_BEFORE_FAILURE:
            self.plan.failed = True
            raise RetryableError("connection reset by peer (injected)")
        outcome = self.inner.put(key, body, create_only=create_only)
        self.plan.puts.append(key)
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


def test_put_only_key_exports_a_full_day_with_a_retry_that_resumes(world: World, iam_moto: MotoServer) -> None:
    # Set-up with auth off: the bucket, the exporter's documented key, a full-rights auditor key,
    # and a key whose policy covers another prefix.
    iam = iam_moto.admin_client("iam")
    iam_moto.admin_client().create_bucket(Bucket=BUCKET)
    exporter = put_only_user(iam, "exporter", BUCKET, PREFIX)
    auditor = make_user(iam, "auditor", policy("s3:*", "*"))
    elsewhere = make_user(iam, "elsewhere", policy("s3:PutObject", f"arn:aws:s3:::{BUCKET}/other-team/*"))
    iam_moto.enforce_auth()

    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
    exports = Exports(world.store, world.policy, clock=world.clock)
    settings: dict[str, Any] = {
        "account_id": "acme",
        "provider": "s3",
        "bucket": BUCKET,
        "prefix": PREFIX,
        "region": "us-east-1",
        "endpoint": iam_moto.endpoint,
        "datasets": ALL_DATASETS,
        "frequency": "1h",
        "lag_ms": LAG,
    }
    # A key for another prefix: refused at creation with the customer's words, nothing saved.
    with pytest.raises(ConnectionTestFailed) as refused:
        exports.create(**settings, access_key_id=elsewhere[0], secret_access_key=elsewhere[1])
    assert f"access denied for s3:PutObject on {BUCKET}/{PREFIX}/_sequenzy/" in str(refused.value)
    assert elsewhere[1] not in str(refused.value)
    assert world.store.list_exports() == []

    # Creation writes the connection test file with the put-only key.
    export = exports.create(**settings, access_key_id=exporter[0], secret_access_key=exporter[1])

    # The day as the scheduler runs it: every hour, each event dataset writes its due window.
    day = day_of(DAY0)
    events = [d for d in ALL_DATASETS if d != "subscribers"]
    plan = FailsOnce()
    runner = world.runner(destination_factory=plan, part_limit=PART_LIMIT)
    windows: dict[str, int] = dict.fromkeys(events, 0)
    resumed = 0
    for hour in range(1, 25):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        for dataset in events:
            if dataset == "email_events" and hour == FLAKY_HOUR + 1:
                # The 10:00 window fails after two parts landed.
                with pytest.raises(RetryableError):
                    runner.run_day(export.id, dataset, day)
                assert plan.failed
                flaky = world.store.ledger(export.id, dataset=dataset)[-1]
                assert flaky.status != COMMITTED and flaky.window.from_ms == DAY0 + FLAKY_HOUR * HOUR_MS
                state = world.store.get_export(export.id).dataset_state(dataset)
                assert state is not None and state.position_ms == flaky.window.from_ms and state.failures == 1
                landed = [k for k in plan.puts if f"{dataset}-{flaky.window.from_ms}-" in k]
                assert landed == [part_key(PREFIX, dataset, flaky.window, n) for n in range(LANDED_BEFORE_FAILURE)]
                # Before the retry most rows of that window leave the source; the parts that landed
                # stay as they are (delivered rows stay delivered) and the retry continues after them.
                removed = delete_most_rows(world, flaky.window)
                assert removed > PART_LIMIT * (LANDED_BEFORE_FAILURE - 1)
                continue
            report = runner.run_day(export.id, dataset, day)
            windows[dataset] += len(report.windows)
            resumed += sum(w.sent.skipped for w in report.windows)
            assert report.complete == (hour == 24)
    assert windows == dict.fromkeys(events, 24)
    assert resumed == LANDED_BEFORE_FAILURE
    retried = [w for w in world.store.ledger(export.id, dataset="email_events") if w.window == flaky.window]
    assert [w.status == COMMITTED for w in retried] == [False, True] and retried[-1].parts > LANDED_BEFORE_FAILURE
    assert len(plan.puts) == len(set(plan.puts)), "no name is ever sent twice"

    # The snapshot after the day ends (plus the lag): parts, then _SUCCESS.
    snap = runner.run_day(export.id, "subscribers", day)
    assert snap.complete and snap.snapshot is not None
    assert snap.snapshot.parts == -(-SCALE.subscribers // PART_LIMIT)
    assert plan.puts[-1] == f"{PREFIX}/subscribers/date={day.isoformat()}/_SUCCESS"

    # Read back with the auditor's key: every row once, chains complete, _SUCCESS after its parts.
    s3 = iam_moto.client_as(auditor)
    audit = audit_export(world.store, world.source_engine, s3, export.id, put_order=plan.puts)
    audit.assert_clean(allow_extra=True)  # rows removed after they landed stay in their files
    assert audit.found == audit.expected + audit.extra and audit.extra == min(
        removed, PART_LIMIT * LANDED_BEFORE_FAILURE
    )
    objects = read_objects(s3, BUCKET, PREFIX)
    stale = part_key("", "email_events", flaky.window, 1)
    assert f"subscribers/date={day.isoformat()}/_SUCCESS" in objects
    assert any(k.startswith("_sequenzy/") for k in objects), "the connection test file was written"
    for state in world.store.get_export(export.id).datasets:
        assert state.position_ms == DAY0 + DAY_MS and state.failures == 0 and state.last_error is None

    # And the exporter's key could not have done anything else.
    as_exporter = iam_moto.client_as(exporter)
    some_key = f"{PREFIX}/{stale}"
    assert denied(lambda: as_exporter.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)) == "AccessDenied"
    assert denied(lambda: as_exporter.get_object(Bucket=BUCKET, Key=some_key)) == "AccessDenied"
    assert denied(lambda: as_exporter.head_object(Bucket=BUCKET, Key=some_key)) in {"403", "AccessDenied"}
    assert denied(lambda: as_exporter.delete_object(Bucket=BUCKET, Key=some_key)) == "AccessDenied"


def test_key_for_another_prefix_fails_the_run_with_a_clear_error(world: World, iam_moto: MotoServer) -> None:
    """Permissions withdrawn after creation (the policy now names another prefix): the run fails
    with a permanent, customer-readable error that names the key it could not write and the grant
    it needs, and the position does not move."""
    iam = iam_moto.admin_client("iam")
    iam_moto.admin_client().create_bucket(Bucket=BUCKET)
    elsewhere = make_user(iam, "elsewhere", policy("s3:PutObject", f"arn:aws:s3:::{BUCKET}/other-team/*"))
    iam_moto.enforce_auth()
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    export = world.store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            BUCKET,
            prefix=PREFIX,
            region="us-east-1",
            endpoint=iam_moto.endpoint,
            access_key_id=elsewhere[0],
            secret_access_key=elsewhere[1],
        ),
        datasets=("email_events",),
        frequency="1h",
        lag_ms=LAG,
        now_ms=DAY0,
    )
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    with pytest.raises(AccessDenied) as info:
        world.runner().run_day(export.id, "email_events", day_of(DAY0))
    assert not info.value.retryable
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == DAY0 and state.failures == 1
    error = state.last_error or ""
    assert f"access denied for s3:PutObject on {BUCKET}/{PREFIX}/email_events/date=2026-09-30/" in error
    assert f"s3:PutObject on {BUCKET}/{PREFIX}/*" in error
    assert elsewhere[1] not in error
