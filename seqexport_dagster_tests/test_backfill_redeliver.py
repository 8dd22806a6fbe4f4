"""The runbook's repair, verbatim (docs/operators.md step 5), through the moto S3 server.

A day is exported, the bucket then loses files (parts of an event window, a snapshot part, a
manifest). `seqexport verify --ledger` fails (exit 7); `seqexport backfill ... --redeliver` sends
every recorded file of the day again create-only; `verify` passes. On an ordinary bucket, with
the customer docs' least-privilege key (PutObject only, IAM enforced: the exporter cannot list or
read), and on a create-only bucket (a write-once proxy refuses any replacement): the names still
there answer 412 and are never replaced (their LastModified is unchanged).
A backfill without ``--redeliver`` and one over days before the export existed say why they did nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config

from seqexport_dagster.contract.window import DAY_MS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.management.api import Exports
from seqexport_dagster_tests.support import moto_server
from seqexport_dagster_tests.support.cli_harness import Cli, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.moto_server import MotoServer
from seqexport_dagster_tests.support.world import ALL_DATASETS, DAY0

BUCKET = "runbook-repair"
PREFIX = "sequenzy"
LAG = 120_000
SCALE = Scale(subscribers=40, email_sends_per_hour=10, sms_sends_per_hour=3, custom_per_hour=4)
D0 = dt.date(2026, 9, 30)


def _listing(s3: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj["LastModified"]
    return out


@dataclass
class Bucket:
    """Where the exporter writes (``endpoint``, with ``exporter``'s key) and where ``reader`` reads."""

    server: MotoServer
    endpoint: str
    exporter: tuple[str, str]
    reader: tuple[str, str]
    proxy: fp.FaultProxy | None = None

    def owner(self) -> Any:
        """The bucket owner's client, in front of the store as the exporter sees it."""
        if self.proxy is None:
            return self.server.client_as(self.reader)
        return boto3.session.Session(aws_access_key_id=self.reader[0], aws_secret_access_key=self.reader[1]).client(
            "s3",
            endpoint_url=self.proxy.endpoint,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, proxies={}, retries={"total_max_attempts": 1}),
        )


@pytest.fixture(name="bucket", params=["ordinary", "put_only_key", "create_only"])
def bucket_fixture(request: pytest.FixtureRequest, moto: MotoServer) -> Iterator[Bucket]:
    """The shared permissive moto; a fresh IAM-enforcing one where the exporter's key may only
    PutObject under the prefix (the customer docs' grant); or the shared moto behind a write-once
    proxy, a bucket that never lets a name be replaced (GCS's Storage Object Creator, S3 Object
    Lock, a create-only bucket policy): a PUT without the create-only precondition to a name that
    exists gets 403, one with it 412."""
    if request.param == "put_only_key":
        server = moto_server.start(iam=True)
        try:
            iam = server.admin_client("iam")
            server.admin_client().create_bucket(Bucket=BUCKET)
            exporter = moto_server.put_only_user(iam, "exporter", BUCKET, PREFIX)
            reader = moto_server.make_user(iam, "reader", moto_server.policy("s3:*", "*"))
            server.enforce_auth()
            yield Bucket(server, server.endpoint, exporter, reader)
        finally:
            server.stop()
        return
    moto.admin_client().create_bucket(Bucket=BUCKET)
    key = ("AKIAORDINARY", "ordinary-secret")
    proxy = fp.FaultProxy(moto.port, write_once=True) if request.param == "create_only" else None
    try:
        yield Bucket(moto, proxy.endpoint if proxy else moto.endpoint, key, key, proxy)
    finally:
        if proxy is not None:
            proxy.close()
        s3 = moto.admin_client()
        for name in _listing(s3):
            s3.delete_object(Bucket=BUCKET, Key=name)
        s3.delete_bucket(Bucket=BUCKET)


def test_runbook_repair_verify_backfill_redeliver_verify_clean(run_sqlite: Cli, bucket: Bucket) -> None:
    server, exporter, reader = bucket.server, bucket.exporter, bucket.reader
    w = run_sqlite.world
    generate_account(w.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
    exports = Exports(w.store, w.policy, clock=w.clock)
    export = exports.create(
        account_id="acme",
        provider="s3",
        bucket=BUCKET,
        prefix=PREFIX,
        region="us-east-1",
        endpoint=bucket.endpoint,
        datasets=ALL_DATASETS,
        frequency="6h",
        lag_ms=LAG,
        access_key_id=exporter[0],
        secret_access_key=exporter[1],
    )
    w.clock.now_ms = DAY0 + DAY_MS + LAG
    runner = w.runner(part_limit=7)
    for dataset in ALL_DATASETS:
        assert runner.run_day(export.id, dataset, D0).complete

    env = {**run_sqlite.env, "READ_SECRET": reader[1]}
    verify = ("verify", f"s3://{BUCKET}/{PREFIX}", "--region", "us-east-1", "--endpoint", server.endpoint,
              "--access-key-id", reader[0], "--secret-env", "READ_SECRET", "--ledger", export.id)  # fmt: skip
    assert run_sqlite(*verify, env=env).code == 0

    admin = server.client_as(reader)
    before = _listing(admin)
    day = f"date={D0.isoformat()}"
    email = sorted(k for k in before if f"/email_events/{day}/" in k)
    lost = [email[0], email[-1], *sorted(k for k in before if f"/subscribers/{day}/subscribers-" in k)[:1]]
    lost += sorted(k for k in before if "/_sequenzy/manifests/" in k and "sms_events" in k)[:1]
    # A snapshot day's `_SUCCESS` comes after its parts; the customer removes it with the lost part
    # (docs/operators.md), so that the repair writes it again after the part, create-only.
    lost += [f"{PREFIX}/subscribers/{day}/_SUCCESS"]
    assert len(lost) == 5 and all(k in before for k in lost)
    # The customer's own admin deletes them (on the create-only bucket through its front, which
    # then lets those names be created again, as the store would).
    owner = bucket.owner()
    for key in lost:
        owner.delete_object(Bucket=BUCKET, Key=key)

    broken = run_sqlite(*verify, env=env)
    assert broken.code == 7, broken

    # Without --redeliver the ledger says everything landed: nothing is sent, and the output says why.
    plain = run_sqlite("backfill", "--export", export.id, "--from", D0.isoformat(), "--to", D0.isoformat())
    assert plain.code == 0 and "wrote 0 files" in plain.out and "--redeliver" in plain.out, plain
    assert run_sqlite(*verify, env=env).code == 7

    # Days before the export existed: nothing, and why.
    early = run_sqlite("backfill", "--export", export.id, "--from", "2026-09-28", "--to", "2026-09-29", "--redeliver")
    assert early.code == 0 and "before the export's first day 2026-09-30" in early.out, early

    # The runbook's step, verbatim.
    fixed = run_sqlite(
        "backfill", "--export", export.id, "--from", D0.isoformat(), "--to", D0.isoformat(), "--redeliver"
    )
    assert fixed.code == 0, fixed
    assert fixed.out.startswith(f"{export.id}: done; wrote ") and "wrote 0 files" not in fixed.out, fixed
    assert "already in the bucket, left as they are" in fixed.out

    assert run_sqlite(*verify, env=env).code == 0
    after = _listing(admin)
    assert set(after) == set(before)
    kept = {k: t for k, t in before.items() if k not in lost}
    assert {k: after[k] for k in kept} == kept, "a name still in the bucket is never replaced"

    # Again: nothing is missing now, and the output says so.
    again = run_sqlite(
        "backfill", "--json", "--export", export.id, "--from", D0.isoformat(), "--to", D0.isoformat(), "--redeliver"
    )
    (outcome,) = again.json["exports"]
    assert outcome["files"] == 0 and outcome["already_present"] > 0
    assert any(why.startswith("nothing missing") for why in outcome["why"])
    if bucket.proxy is not None:
        # The write-once bucket: no PUT ever tried to replace a name; every name still there answered 412.
        assert bucket.proxy.overwrites == []
        refused = [r for r in bucket.proxy.puts(f"/{BUCKET}/") if r.status == 412]
        assert refused, "the names still in the bucket were sent create-only and refused"
