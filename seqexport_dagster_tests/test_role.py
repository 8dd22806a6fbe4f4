"""AWS role exports: STS AssumeRole with our external id, against moto's STS and IAM with enforcement.

moto checks the operator's identity policy (``sts:AssumeRole``), the role's trust policy (principal
and ``sts:ExternalId``), and then every PutObject against the role's own policy, the PutObject-only
one of the customer docs. Requests go through the fault proxy, which records the headers as they
arrived, so the tests see which credential signed each PUT.

moto does not expire temporary credentials, so the refresh test gives the `RoleAssumer` a clock of
its own that moves 15 minutes per PUT, and reports STS's expiry one hour after that clock's now: a
day of windows crosses several expiries in one run.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from botocore.config import Config
from botocore.exceptions import ClientError

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, day_of
from seqexport_dagster.delivery.connection_test import ConnectionTestFailed
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3 import S3Destination
from seqexport_dagster.destination.sts import (
    REFRESH_BEFORE_MS,
    AwsIdentity,
    RoleAssumer,
    assume_role_call,
    trust_policy,
)
from seqexport_dagster.errors import ConfigurationError, ConflictError, InvalidInput
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.presentation import export_json
from seqexport_dagster_tests.support.faults.proxy import FaultProxy, Record
from seqexport_dagster_tests.support.moto_server import MotoServer
from seqexport_dagster_tests.support.world import DAY0, World

BUCKET = "acme-role-exports"
PREFIX = "sequenzy"
LAG = 120_000
SCALE = Scale(subscribers=20, email_sends_per_hour=8, sms_sends_per_hour=2, custom_per_hour=2)
ROLE = "arn:aws:iam::123456789012:role/acme-writer"
_CREDENTIAL_RE = re.compile(r"Credential=([A-Z0-9]+)/")


def _doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def signer(record: Record) -> str:
    found = _CREDENTIAL_RE.search(record.header("Authorization") or "")
    return found.group(1) if found else ""


class Scene:
    """moto with IAM: our operator user, the customer's bucket, and a role per test."""

    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto
        self.iam = moto.admin_client("iam")
        moto.admin_client().create_bucket(Bucket=BUCKET)
        self.iam.create_user(UserName="sequenzy-exporter")
        self.iam.put_user_policy(
            UserName="sequenzy-exporter",
            PolicyName="assume-customer-roles",
            PolicyDocument=_doc({"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}),
        )
        key = self.iam.create_access_key(UserName="sequenzy-exporter")["AccessKey"]
        self.identity = AwsIdentity(
            access_key_id=key["AccessKeyId"],
            secret_access_key=key["SecretAccessKey"],
            principal_arn="arn:aws:iam::123456789012:user/sequenzy-exporter",
            sts_endpoint=moto.endpoint,
        )
        self.auditor = self._user("auditor", _doc({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}))
        self.proxy = FaultProxy(moto.port)

    def _user(self, name: str, document: str) -> tuple[str, str]:
        self.iam.create_user(UserName=name)
        self.iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=document)
        key = self.iam.create_access_key(UserName=name)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def role(self, name: str, trust: dict[str, Any]) -> str:
        arn = self.iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        self.iam.put_role_policy(
            RoleName=name,
            PolicyName="sequenzy-put-only",
            PolicyDocument=_doc(
                {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{BUCKET}/{PREFIX}/*"}
            ),
        )
        return str(arn)

    @property
    def policy(self) -> OperatorPolicy:
        return OperatorPolicy(allow_local=True, aws_identity=self.identity)

    def client(self, key: tuple[str, str], service: str = "s3", token: str | None = None) -> Any:
        return boto3.session.Session(
            aws_access_key_id=key[0], aws_secret_access_key=key[1], aws_session_token=token, region_name="us-east-1"
        ).client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.moto.endpoint,
            config=Config(s3={"addressing_style": "path"}, proxies={}, retries={"total_max_attempts": 1}),
        )

    def settings(self, role_arn: str, external_id: str) -> dict[str, Any]:
        return {
            "account_id": "acme",
            "provider": "s3",
            "bucket": BUCKET,
            "prefix": PREFIX,
            "region": "us-east-1",
            "endpoint": self.proxy.endpoint,
            "datasets": ["email_events"],
            "frequency": "1h",
            "lag_ms": LAG,
            "role_arn": role_arn,
            "external_id": external_id,
        }


@pytest.fixture
def scene(iam_moto: MotoServer) -> Iterator[Scene]:
    s = Scene(iam_moto)
    try:
        yield s
    finally:
        s.proxy.close()


def test_role_values_are_checked_before_anything_is_sent() -> None:
    policy = OperatorPolicy(allow_local=True)
    base = DestinationConfig("s3", BUCKET, region="us-east-1", role_arn=ROLE, external_id="sequenzy-" + "0" * 32)
    assert validate_config(base, policy).role_arn == ROLE
    cases = [
        (
            DestinationConfig("s3", BUCKET, region="us-east-1", role_arn="arn:aws:iam::12:role/x", external_id="ab"),
            "role_arn",
            "is not an IAM role ARN",
        ),
        (DestinationConfig("s3", BUCKET, region="us-east-1", role_arn=ROLE), "external_id", "seqexport role-setup"),
        (DestinationConfig("s3", BUCKET, region="us-east-1", external_id="abc"), "role_arn", "is required"),
        (DestinationConfig("gcs", BUCKET, role_arn=ROLE, external_id="abc"), "role_arn", "Amazon S3 only"),
        (
            DestinationConfig(
                "s3",
                BUCKET,
                region="us-east-1",
                role_arn=ROLE,
                external_id="abc",
                access_key_id="AKIA1",
                secret_access_key="s",
            ),
            "role_arn",
            "not both",
        ),
        (
            DestinationConfig(
                "s3", BUCKET, region="us-east-1", endpoint="https://minio.example.com", role_arn=ROLE, external_id="abc"
            ),
            "endpoint",
            "Amazon S3 only",
        ),
        (DestinationConfig("s3", BUCKET, role_arn=ROLE, external_id="abc"), "region", "is required"),
    ]
    for config, field, words in cases:
        with pytest.raises(InvalidInput) as info:
            validate_config(config, policy)
        assert info.value.field == field and words in info.value.message, (config, info.value)


def test_operator_identity_comes_from_settings_only() -> None:
    env = {
        "SEQEXPORT_AWS_ACCESS_KEY_ID": "AKIAOPERATOR00000001",
        "SEQEXPORT_AWS_SECRET_ACCESS_KEY": "operator-secret-never-shown",
        "SEQEXPORT_AWS_PRINCIPAL_ARN": "arn:aws:iam::999988887777:role/sequenzy-exporter",
        # The worker's own AWS variables are never read.
        "AWS_ACCESS_KEY_ID": "AKIAWORKER0000000001",
    }
    identity = Settings.from_env(env).policy.aws_identity
    assert identity is not None and identity.access_key_id == "AKIAOPERATOR00000001"
    assert "operator-secret-never-shown" not in repr(identity) + repr(Settings.from_env(env))
    assert Settings.from_env({"AWS_ACCESS_KEY_ID": "AKIAWORKER0000000001"}).policy.aws_identity is None
    with pytest.raises(ConfigurationError, match="SEQEXPORT_AWS_PRINCIPAL_ARN"):
        Settings.from_env({k: v for k, v in env.items() if k != "SEQEXPORT_AWS_PRINCIPAL_ARN"})
    with pytest.raises(ConfigurationError, match="https"):
        Settings.from_env({**env, "SEQEXPORT_STS_ENDPOINT": "http://sts.example.com"})


def test_right_external_id_exports_with_the_put_only_policy(world: World, scene: Scene) -> None:
    world.policy = scene.policy
    exports = Exports(world.store, scene.policy, clock=world.clock)
    setup = exports.role_setup("acme")
    assert setup.external_id.startswith("sequenzy-") and len(setup.external_id) == 41
    assert setup.trust_policy == trust_policy(scene.identity.principal_arn, setup.external_id)
    role_arn = scene.role("acme-writer", setup.trust_policy)
    scene.moto.enforce_auth()

    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
    export = exports.create(**scene.settings(role_arn, setup.external_id))
    shown = export_json(export)
    assert (shown["role_arn"], shown["external_id"], shown["access_key_id"]) == (role_arn, setup.external_id, None)
    runner = world.runner(part_limit=10)
    for hour in (6, 12, 24):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        runner.run_day(export.id, "email_events", day_of(DAY0))
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.position_ms == DAY0 + DAY_MS and state.failures == 0

    puts = scene.proxy.puts(f"/{BUCKET}/")
    assert len(puts) > 10 and all(r.status == 200 for r in puts)
    # Every PUT was signed by the role's temporary credentials, never by our own identity.
    assert all(r.header("x-amz-security-token") for r in puts)
    assert {signer(r) for r in puts}.isdisjoint({scene.identity.access_key_id, ""})
    objects = scene.client(scene.auditor).list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/email_events/")
    assert len(objects["Contents"]) >= 3

    # Our own identity may not write to the bucket at all: S3 only ever sees the customer's role.
    ours = scene.client((scene.identity.access_key_id, scene.identity.secret_access_key))
    with pytest.raises(ClientError):
        ours.put_object(Bucket=BUCKET, Key=f"{PREFIX}/x.txt", Body=b"x")
    # And the role can do nothing but PutObject under the prefix.
    creds = scene.client((scene.identity.access_key_id, scene.identity.secret_access_key), "sts").assume_role(
        RoleArn=role_arn, RoleSessionName="audit", ExternalId=setup.external_id
    )["Credentials"]
    as_role = scene.client((creds["AccessKeyId"], creds["SecretAccessKey"]), token=creds["SessionToken"])
    with pytest.raises(ClientError):
        as_role.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)
    with pytest.raises(ClientError):
        as_role.put_object(Bucket=BUCKET, Key="elsewhere/x.txt", Body=b"x")

    # The external id is taken: another export cannot reuse it.
    with pytest.raises(ConflictError):
        exports.create(**{**scene.settings(role_arn, setup.external_id), "prefix": f"{PREFIX}/two"})


def test_wrong_external_id_or_trust_is_refused_clearly_at_the_connection_test(world: World, scene: Scene) -> None:
    world.policy = scene.policy
    exports = Exports(world.store, scene.policy, clock=world.clock)
    setup = exports.role_setup("acme")
    other = exports.role_setup("acme")
    # The role trusts us, but with another external id; a second role trusts someone else.
    wrong_id = scene.role("wrong-id", trust_policy(scene.identity.principal_arn, other.external_id))
    stranger = scene.role("stranger", trust_policy("arn:aws:iam::123456789012:user/someone-else", setup.external_id))
    scene.moto.enforce_auth()
    for role_arn in (wrong_id, stranger):
        with pytest.raises(ConnectionTestFailed) as refused:
            exports.create(**scene.settings(role_arn, setup.external_id))
        message = str(refused.value)
        assert f"cannot assume role {role_arn}" in message
        assert f"must allow {scene.identity.principal_arn} to call sts:AssumeRole" in message
        assert f"sts:ExternalId = {setup.external_id}" in message and "nothing was saved" in message
        assert scene.identity.secret_access_key not in message
    assert world.store.list_exports() == [] and scene.proxy.puts(f"/{BUCKET}/") == []
    # An id we never issued (chosen by the customer), or another account's, is refused before any call.
    with pytest.raises(InvalidInput) as chosen:
        exports.create(**scene.settings(wrong_id, "my-own-external-id"))
    assert chosen.value.field == "external_id" and "role-setup" in chosen.value.message
    theirs = exports.role_setup("globex")
    with pytest.raises(InvalidInput):
        exports.create(**scene.settings(wrong_id, theirs.external_id))
    with pytest.raises(InvalidInput) as missing:
        exports.create(**{**scene.settings(wrong_id, setup.external_id), "external_id": None})
    assert missing.value.field == "external_id"


class _Ticking:
    """The real destination; the assumer's clock moves 15 minutes before each PUT, and each PUT
    records (clock, the credential that signed it on the wire)."""

    def __init__(self, inner: Destination, scene: Scene, ticks: dict[str, int], seen: list[tuple[int, str]]) -> None:
        self.inner, self.scene, self.ticks, self.seen = inner, scene, ticks, seen
        self.preconditions = inner.preconditions

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        self.ticks["now"] += 15 * 60_000
        outcome = self.inner.put(key, body, create_only=create_only)
        self.seen.append((self.ticks["now"], signer(self.scene.proxy.log[-1])))
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


def test_credentials_refresh_across_an_expiry_in_the_middle_of_a_run(world: World, scene: Scene) -> None:
    world.policy = scene.policy
    exports = Exports(world.store, scene.policy, clock=world.clock)
    setup = exports.role_setup("acme")
    role_arn = scene.role("acme-writer", setup.trust_policy)
    scene.moto.enforce_auth()
    ticks = {"now": wall_clock_ms()}
    issued: dict[str, int] = {}

    def sts(identity: AwsIdentity, params: dict[str, Any]) -> dict[str, Any]:
        answer = assume_role_call(identity, params)  # the real call to moto's STS
        expires = ticks["now"] + params["DurationSeconds"] * 1000
        answer["Credentials"]["Expiration"] = dt.datetime.fromtimestamp(expires / 1000, dt.UTC)
        issued[answer["Credentials"]["AccessKeyId"]] = expires
        return answer

    assumer = RoleAssumer(scene.identity, clock=lambda: ticks["now"], call=sts)
    seen: list[tuple[int, str]] = []

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return _Ticking(S3Destination(config, policy, assumer=assumer), scene, ticks, seen)

    exports.destination_factory = factory
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SCALE)
    export = exports.create(**scene.settings(role_arn, setup.external_id))
    assert assumer.assumed == 1
    # One run writes the whole day as one catch-up window of about 50 parts: at 15 simulated minutes
    # per PUT that is about 12 hours, so the credentials expire many times inside a single window.
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    report = world.runner(part_limit=10, destination_factory=factory).run_day(export.id, "email_events", day_of(DAY0))
    assert len(report.windows) == 1 and report.complete and report.windows[0].parts >= 40
    assert report.windows[0].sent.skipped == 0 and report.windows[0].restarts == 0
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 0 and state.last_error is None
    hours = (ticks["now"] - min(t for t, _ in seen)) / HOUR_MS
    assert hours >= 10 and assumer.assumed >= hours  # refreshed about once per simulated hour
    assert set(issued) == {key for _, key in seen}  # every issued credential was used, and only those
    for at, key in seen:
        assert at < issued[key] - REFRESH_BEFORE_MS + 15 * 60_000, "a PUT used credentials past their refresh time"
        assert at < issued[key], "a PUT used expired credentials"
    assert all(r.status == 200 for r in scene.proxy.puts(f"/{BUCKET}/"))
    # The temporary secrets and tokens went nowhere but the signature.
    ledger = world.store.ledger(export.id)
    text = json.dumps(export_json(world.store.get_export(export.id))) + repr(ledger) + repr(report)
    for r in scene.proxy.puts(f"/{BUCKET}/"):
        token = r.header("x-amz-security-token") or ""
        assert token and token not in text
    assert repr(assumer.credentials(role_arn, setup.external_id, "x")).count("secret_access_key") == 0


def test_role_setup_and_role_export_through_the_http_api_and_the_remote_cli(
    world: World, scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same flow over HTTP: an account token gets an external id and the trust policy, creates
    the export with its role (the server assumes it for the connection test), and the answer shows
    the role and the external id, never a credential. The CLI renders the setup for people."""
    from seqexport_dagster.cli.render import Output, role_setup
    from seqexport_dagster.management.remote import RemoteExports
    from seqexport_dagster_tests.support.api_server import mint, serve_thread

    world.policy = scene.policy
    exports = Exports(world.store, scene.policy, clock=world.clock)
    with serve_thread(exports) as server:
        remote = RemoteExports(server.url, mint(exports, "acme"))
        try:
            setup = remote.role_setup("acme")
            assert setup.principal_arn == scene.identity.principal_arn
            role_arn = scene.role("acme-writer", setup.trust_policy)
            scene.moto.enforce_auth()
            record = remote.create(**scene.settings(role_arn, setup.external_id))
            assert (record.role_arn, record.external_id, record.access_key_id) == (role_arn, setup.external_id, None)
            with server.client(mint(exports, "globex")) as other:
                answer = other.post("/v1/role-setups", json={"account_id": "acme"})
                assert answer.status_code == 400 and answer.json()["error"]["field"] == "account_id"
        finally:
            remote.close()
    assert world.store.get_export(record.id).role_arn == role_arn
    assert any(f"/{BUCKET}/{PREFIX}/_sequenzy/" in r.path for r in scene.proxy.puts())
    capsys.readouterr()
    role_setup(Output(as_json=False), setup)
    text = capsys.readouterr().out
    assert setup.external_id in text and '"sts:ExternalId"' in text and scene.identity.principal_arn in text


def test_an_export_moves_from_a_key_onto_a_role_and_back(world: World, scene: Scene) -> None:
    world.policy = scene.policy
    exports = Exports(world.store, scene.policy, clock=world.clock)
    put_only = _doc({"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{BUCKET}/{PREFIX}/*"})
    writer = scene._user("key-writer", put_only)
    setup = exports.role_setup("acme")
    role_arn = scene.role("acme-writer", setup.trust_policy)
    scene.moto.enforce_auth()
    keyed = {**scene.settings(role_arn, setup.external_id), "role_arn": None, "external_id": None}
    export = exports.create(**keyed, access_key_id=writer[0], secret_access_key=writer[1])
    assert export.role_arn is None and export.access_key_id == writer[0]

    # A role given without an id from a role setup is refused before anything is sent.
    with pytest.raises(InvalidInput) as info:
        exports.change_destination(export.id, role_arn=role_arn)
    assert info.value.field == "external_id"
    moved = exports.change_destination(export.id, role_arn=role_arn, external_id=setup.external_id)
    assert (moved.role_arn, moved.external_id, moved.access_key_id) == (role_arn, setup.external_id, None)
    assert moved.destination_version == export.destination_version + 1
    config, _ = world.store.destination_config(export.id)
    assert config.secret_access_key is None and config.access_key_id is None
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SCALE)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + LAG
    world.runner(part_limit=10).run_day(export.id, "email_events", day_of(DAY0))
    last = scene.proxy.puts(f"/{BUCKET}/")[-1]
    assert last.status == 200 and last.header("x-amz-security-token") and signer(last) != writer[0]

    # Back to a key: the role and its external id go.
    back = exports.change_destination(export.id, access_key_id=writer[0], secret_access_key=writer[1])
    assert (back.role_arn, back.external_id, back.access_key_id) == (None, None, writer[0])
    assert signer(scene.proxy.puts(f"/{BUCKET}/")[-1]) == writer[0]  # its connection test, with the key


def test_a_deployment_without_an_aws_identity_offers_no_roles(world: World) -> None:
    """Not a fault of the service (the HTTP API answers 409, not 5xx): the customer gives a key."""
    exports = Exports(world.store, OperatorPolicy(allow_local=True), clock=world.clock)
    with pytest.raises(ConflictError, match="offers no AWS roles"):
        exports.role_setup("acme")
    settings = {
        "account_id": "acme", "provider": "s3", "bucket": BUCKET, "region": "us-east-1",
        "datasets": ["email_events"], "role_arn": ROLE, "external_id": "sequenzy-" + "0" * 32,
    }  # fmt: skip
    with pytest.raises(ConflictError, match="give an access key instead"):
        exports.create(**settings)
    assert world.store.list_exports() == []


def _own_identity() -> AwsIdentity:
    return AwsIdentity("AKIAOPERATOR00000001", "operator-secret", "arn:aws:iam::123456789012:user/sequenzy-exporter")


def test_a_role_in_the_exporters_own_aws_account_is_refused(world: World) -> None:
    """A role of our own account would write with our permissions; the external id cannot stop that,
    since we would own the trust policy too. Refused before anything is sent."""
    exports = Exports(world.store, OperatorPolicy(aws_identity=_own_identity()), clock=world.clock)
    setup = exports.role_setup("acme")
    settings = {
        "account_id": "acme", "provider": "s3", "bucket": BUCKET, "region": "us-east-1",
        "datasets": ["email_events"], "external_id": setup.external_id,
    }  # fmt: skip
    for own in (ROLE, "arn:aws-us-gov:iam::123456789012:role/x"):
        with pytest.raises(InvalidInput) as refused:
            exports.create(**settings, role_arn=own)
        assert (
            refused.value.field == "role_arn" and "Sequenzy's own AWS account (123456789012)" in refused.value.message
        )
    assert world.store.list_exports() == []


def test_role_setups_are_rate_limited_and_unused_external_ids_pruned(world: World) -> None:
    from seqexport_dagster.errors import RateLimited
    from seqexport_dagster.store.external_ids import UNUSED_EXTERNAL_ID_MS, take_external_id
    from seqexport_dagster.store.maintenance import maintain
    from seqexport_dagster.store.rate_limit import ROLE_SETUP
    from seqexport_dagster.store.tables import external_ids

    exports = Exports(world.store, OperatorPolicy(aws_identity=_own_identity()), clock=world.clock)
    issued = [exports.role_setup("acme").external_id for _ in range(ROLE_SETUP.limit)]
    with pytest.raises(RateLimited, match="20 role setups in the last 60 minutes"):
        exports.role_setup("acme")
    assert exports.role_setup("globex").external_id, "another account's limit is its own"
    take_external_id(world.control_engine, "acme", issued[0], "exp_taken")
    world.clock.advance(UNUSED_EXTERNAL_ID_MS + 1)
    report = maintain(world.control_engine, world.clock())
    assert report.external_ids == ROLE_SETUP.limit and report.as_dict()["external_ids_removed"] == ROLE_SETUP.limit
    with world.control_engine.connect() as conn:
        kept = conn.execute(sa.select(external_ids.c.external_id)).scalars().all()
    assert kept == [issued[0]], "the id an export took stays"
    assert report.rate_events > 0 and maintain(world.control_engine, world.clock()).external_ids == 0
    exports.role_setup("acme")  # the window has passed


def test_every_role_session_has_its_own_name() -> None:
    asked: list[dict[str, Any]] = []

    def sts(identity: AwsIdentity, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        return {
            "Credentials": {"AccessKeyId": "ASIA1", "SecretAccessKey": "s", "SessionToken": "t", "Expiration": expires}
        }

    assumer = RoleAssumer(_own_identity(), call=sts)
    long_id = "exp_" + "9" * 60
    for base in ("sequenzy-exp_0123456789abcdef", "sequenzy-exp_0123456789abcdef", f"sequenzy-{long_id}"):
        assumer.credentials(ROLE, "sequenzy-" + "1" * 32, base)
        assumer.forget(ROLE, "sequenzy-" + "1" * 32)
    names = [p["RoleSessionName"] for p in asked]
    assert len(set(names)) == 3, names
    assert all(re.fullmatch(r"[\w+=,.@-]{2,64}", n) for n in names), names
    assert names[0].startswith("sequenzy-exp_0123456789abcdef-") and names[2].startswith("sequenzy-exp_999")


def test_sts_refusing_the_exporters_own_keys_is_the_operators_fault(world: World, scene: Scene) -> None:
    """moto's STS answers 403 InvalidClientTokenId (unknown key) and SignatureDoesNotMatch (wrong
    secret): neither is the customer's trust policy."""
    from dataclasses import replace

    exports = Exports(world.store, scene.policy, clock=world.clock)
    setup = exports.role_setup("acme")
    role_arn = scene.role("acme-writer", setup.trust_policy)
    scene.moto.enforce_auth()
    wrong = {
        "InvalidClientTokenId": replace(scene.identity, access_key_id="AKIANOSUCHKEY0000001"),
        "SignatureDoesNotMatch": replace(scene.identity, secret_access_key="not-the-operators-secret"),
    }
    for code, identity in wrong.items():
        policy = OperatorPolicy(allow_local=True, aws_identity=identity)
        with pytest.raises((ConfigurationError, ConnectionTestFailed)) as refused:
            Exports(world.store, policy, clock=world.clock).create(**scene.settings(role_arn, setup.external_id))
        message = str(refused.value)
        assert f"exporter's own AWS identity was refused by STS ({code})" in message, message
        assert "trust policy" not in message and identity.secret_access_key not in message
    assert world.store.list_exports() == []
