"""SSE-S3 and SSE-KMS per export: the rules for the values, the headers on the wire, least privilege.

The wire tests run the real `S3Destination` against a moto server through the fault proxy, which
records every request's headers as they arrived: each PutObject of the export (the connection test
file included) carries ``x-amz-server-side-encryption`` (and the key id for SSE-KMS), against an
ordinary bucket and a create-only one. moto does not ask KMS for a data key, so the least-privilege
test puts `KmsGate` in front of an IAM-enforcing moto: it evaluates the signing user's policies for
``kms:GenerateDataKey`` on the key, as S3 does on AWS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, day_of
from seqexport_dagster.delivery.connection_test import ConnectionTestFailed
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.encryption import describe_sse, sse_headers, validate_sse
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.presentation import export_from_json, export_json
from seqexport_dagster_tests.support.faults.proxy import FaultProxy, lost_reply
from seqexport_dagster_tests.support.kms_gate import KmsGate
from seqexport_dagster_tests.support.moto_server import MotoServer
from seqexport_dagster_tests.support.world import DAY0, World

KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SCALE = Scale(subscribers=20, email_sends_per_hour=12, sms_sends_per_hour=2, custom_per_hour=2)
LAG = 120_000
PREFIX = "sequenzy"


def test_sse_values_are_checked_together() -> None:
    assert validate_sse(None, None, "s3") == (None, None)
    assert validate_sse("", "", "s3") == (None, None)
    assert validate_sse("AES256", None, "s3") == ("AES256", None)
    assert validate_sse("aws:kms", KEY_ARN, "s3") == ("aws:kms", KEY_ARN)
    for key in (
        "1234abcd-12ab-34cd-56ef-1234567890ab",
        "alias/exports",
        "mrk-" + "0" * 32,
        "arn:aws:kms:eu-west-2:111122223333:alias/exports",
    ):
        assert validate_sse("aws:kms", key, "s3")[1] == key
    cases = [
        (("aws:kms", None, "s3"), "kms_key_id", "is required with sse aws:kms"),
        (("aws:kms", "arn:aws:s3:::bucket", "s3"), "kms_key_id", "is not a KMS key"),
        (("aws:kms", KEY_ARN + "\n", "s3"), "kms_key_id", "is not a KMS key"),
        (("AES256", KEY_ARN, "s3"), "kms_key_id", "not AES256"),
        ((None, KEY_ARN, "s3"), "kms_key_id", "only used with sse aws:kms"),
        (("aes256", None, "s3"), "sse", "is not one of AES256"),
        (("aws:kms:dsse", KEY_ARN, "s3"), "sse", "is not one of AES256"),
        (("AES256", None, "gcs"), "sse", "gcs encrypts every object"),
    ]
    for args, field, words in cases:
        with pytest.raises(InvalidInput) as info:
            validate_sse(*args)
        assert info.value.field == field and words in info.value.message, args


def test_headers_and_description() -> None:
    assert sse_headers(None, None) == {}
    assert sse_headers("AES256", None) == {"ServerSideEncryption": "AES256"}
    assert sse_headers("aws:kms", KEY_ARN) == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY_ARN}
    assert describe_sse("aws:kms", KEY_ARN) == f"SSE-KMS ({KEY_ARN})"
    assert describe_sse("AES256", None) == "SSE-S3 (AES256)"
    assert describe_sse(None, None) == "bucket default"


def test_validate_config_carries_sse_through() -> None:
    config = DestinationConfig(
        "s3",
        "acme-exports",
        region="us-east-1",
        access_key_id="AKIA1",
        secret_access_key="s",
        sse="aws:kms",
        kms_key_id=KEY_ARN,
    )
    checked = validate_config(config, OperatorPolicy())
    assert (checked.sse, checked.kms_key_id) == ("aws:kms", KEY_ARN)
    with pytest.raises(InvalidInput) as info:
        validate_config(
            DestinationConfig(
                "s3", "acme-exports", region="us-east-1", access_key_id="AKIA1", secret_access_key="s", sse="aws:kms"
            ),
            OperatorPolicy(),
        )
    assert info.value.field == "kms_key_id"


@pytest.fixture(params=[False, True], ids=["ordinary", "create-only"])
def proxy(request: pytest.FixtureRequest, moto: MotoServer) -> Iterator[FaultProxy]:
    p = FaultProxy(moto.port, write_once=request.param)
    try:
        yield p
    finally:
        p.close()


def _exports(world: World) -> Exports:
    return Exports(world.store, world.policy, clock=world.clock)


def _settings(bucket: str, endpoint: str) -> dict[str, Any]:
    return {
        "account_id": "acme",
        "provider": "s3",
        "bucket": bucket,
        "prefix": PREFIX,
        "region": "us-east-1",
        "endpoint": endpoint,
        "datasets": ["email_events"],
        "frequency": "1h",
        "lag_ms": LAG,
        "access_key_id": "AKIAENCRYPTION000001",
        "secret_access_key": "encryption-test-secret-0001",
    }


@pytest.mark.parametrize(("sse", "kms_key_id"), [("AES256", None), ("aws:kms", KEY_ARN)])
def test_every_put_carries_the_encryption_headers(
    world: World, moto: MotoServer, proxy: FaultProxy, sse: str, kms_key_id: str | None
) -> None:
    s3 = moto.admin_client()
    bucket = f"sse-{'kms' if kms_key_id else 's3'}-{'once' if proxy.write_once else 'plain'}-{world.root.name[-6:]}"
    bucket = bucket.lower().replace("_", "-")
    s3.create_bucket(Bucket=bucket)
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, scale=SCALE)
    export = _exports(world).create(**_settings(bucket, proxy.endpoint), sse=sse, kms_key_id=kms_key_id)
    assert (export.sse, export.kms_key_id) == (sse, kms_key_id)
    shown = export_json(export)
    assert (shown["sse"], shown["kms_key_id"]) == (sse, kms_key_id)
    back = export_from_json(shown)
    assert (back.sse, back.kms_key_id) == (sse, kms_key_id)
    # A lost answer makes the runner send one part again: the re-send carries the headers as well
    # (and meets the create-only precondition on the create-only store).
    proxy.add(lost_reply(match="-0002.jsonl.gz"))
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + LAG
    runner = world.runner(part_limit=10)
    for _ in range(2):
        try:
            report = runner.run_day(export.id, "email_events", day_of(DAY0))
        except Exception:
            continue
        break
    assert len(report.windows) >= 1
    puts = proxy.puts(f"/{bucket}/")
    assert len(puts) > 4 and any("/_sequenzy/" in r.path for r in puts)
    for record in puts:
        assert record.header("x-amz-server-side-encryption") == sse, record.path
        assert record.header("x-amz-server-side-encryption-aws-kms-key-id") == kms_key_id, record.path
    assert len([r for r in puts if r.path.endswith("-0002.jsonl.gz")]) >= 2
    # The store recorded it on each object too.
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=PREFIX)["Contents"]
    assert listed
    for obj in listed:
        head = s3.head_object(Bucket=bucket, Key=obj["Key"])
        assert head["ServerSideEncryption"] == sse
        assert head.get("SSEKMSKeyId") == kms_key_id
    assert proxy.overwrites == []


def test_changing_encryption_is_tested_and_saved(world: World, moto: MotoServer) -> None:
    s3 = moto.admin_client()
    bucket = f"sse-change-{world.root.name[-6:]}".lower().replace("_", "-")
    s3.create_bucket(Bucket=bucket)
    proxy = FaultProxy(moto.port)
    try:
        exports = _exports(world)
        export = exports.create(**_settings(bucket, proxy.endpoint))
        assert (export.sse, export.kms_key_id) == (None, None)
        assert proxy.puts()[-1].header("x-amz-server-side-encryption") is None
        changed = exports.change_destination(export.id, sse="aws:kms", kms_key_id=KEY_ARN)
        assert (changed.sse, changed.kms_key_id) == ("aws:kms", KEY_ARN)
        assert changed.destination_version == export.destination_version + 1
        assert proxy.puts()[-1].header("x-amz-server-side-encryption-aws-kms-key-id") == KEY_ARN
        config, _ = world.store.destination_config(export.id)
        assert (config.sse, config.kms_key_id) == ("aws:kms", KEY_ARN)
        # Back to SSE-S3 drops the key; "" goes back to the bucket's default.
        assert exports.change_destination(export.id, sse="AES256").kms_key_id is None
        cleared = exports.change_destination(export.id, sse="")
        assert (cleared.sse, cleared.kms_key_id) == (None, None)
        # A wrong value is refused before anything is sent or saved.
        before = len(proxy.puts())
        with pytest.raises(InvalidInput) as info:
            exports.change_destination(export.id, sse="aws:kms", kms_key_id="not-a-key")
        assert info.value.field == "kms_key_id" and len(proxy.puts()) == before
        assert world.store.get_export(export.id).sse is None
    finally:
        proxy.close()


def _policy(*statements: tuple[str | list[str], str]) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": a, "Resource": r} for a, r in statements],
        }
    )


def _user(iam: Any, name: str, document: str) -> tuple[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=document)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def test_put_only_key_with_kms_generate_data_key_is_all_sse_kms_needs(world: World, iam_moto: MotoServer) -> None:
    """The docs' policy (s3:PutObject on the prefix, kms:GenerateDataKey on the key) exports a day
    with SSE-KMS under IAM enforcement; the same key without the KMS grant is refused at the
    connection test, with a message naming the grant, and nothing is saved."""
    bucket = "acme-kms-exports"
    iam = iam_moto.admin_client("iam")
    iam_moto.admin_client().create_bucket(Bucket=bucket)
    key_arn = iam_moto.admin_client("kms").create_key(Description="exports")["KeyMetadata"]["Arn"]
    put = ("s3:PutObject", f"arn:aws:s3:::{bucket}/{PREFIX}/*")
    exporter = _user(iam, "exporter", _policy(put, ("kms:GenerateDataKey", key_arn)))
    no_kms = _user(iam, "no-kms", _policy(put))
    other_key = _user(iam, "other-key", _policy(put, ("kms:GenerateDataKey", key_arn[:-4] + "0000")))
    auditor = _user(iam, "auditor", _policy(("s3:*", "*"), ("iam:*", "*"), ("kms:*", "*")))
    iam_moto.enforce_auth()
    import boto3

    auditor_iam = boto3.session.Session(
        aws_access_key_id=auditor[0], aws_secret_access_key=auditor[1], region_name="us-east-1"
    ).client("iam", endpoint_url=iam_moto.endpoint)
    gate = KmsGate(
        auditor_iam,
        {exporter[0]: ("user", "exporter"), no_kms[0]: ("user", "no-kms"), other_key[0]: ("user", "other-key")},
    )
    proxy = FaultProxy(iam_moto.port)
    proxy.gate = gate
    try:
        generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
        exports = _exports(world)
        settings = {**_settings(bucket, proxy.endpoint), "sse": "aws:kms", "kms_key_id": key_arn}
        for refused_key in (no_kms, other_key):
            with pytest.raises(ConnectionTestFailed) as refused:
                exports.create(**{**settings, "access_key_id": refused_key[0], "secret_access_key": refused_key[1]})
            message = str(refused.value)
            assert f"s3:PutObject on {bucket}/{PREFIX}/*" in message
            assert f"kms:GenerateDataKey on the KMS key {key_arn}" in message
            assert refused_key[1] not in message
        assert world.store.list_exports() == []

        export = exports.create(**{**settings, "access_key_id": exporter[0], "secret_access_key": exporter[1]})
        runner = world.runner(part_limit=10)
        for hour in range(1, 25):
            world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
            runner.run_day(export.id, "email_events", day_of(DAY0))
        state = world.store.get_export(export.id).dataset_state("email_events")
        assert state is not None and state.position_ms == DAY0 + DAY_MS and state.failures == 0
        puts = [r for r in proxy.puts(f"/{bucket}/") if r.status == 200]
        assert len(puts) >= 25
        assert all(r.header("x-amz-server-side-encryption-aws-kms-key-id") == key_arn for r in puts)
        assert {(k, allowed) for k, _, allowed in gate.checked if k == exporter[0]} == {(exporter[0], True)}
        assert len(gate.checked) == len(proxy.puts(f"/{bucket}/"))  # every PUT was judged
        s3 = boto3.session.Session(
            aws_access_key_id=auditor[0], aws_secret_access_key=auditor[1], region_name="us-east-1"
        ).client("s3", endpoint_url=iam_moto.endpoint)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/email_events/")["Contents"]]
        assert len(keys) >= 24
        assert s3.head_object(Bucket=bucket, Key=keys[0])["SSEKMSKeyId"] == key_arn
    finally:
        proxy.close()
