"""Azure Blob Storage, provider ``azure`` (issue 45), against a real Azurite on 127.0.0.1.

One Azurite (from npm, `.ci/prepare-test`) serves the module, in memory, in its own process group.
The exporter writes with a create-only SAS (``sp=c``), signed here from Azurite's published
development key, as a customer's would be from theirs:

* the connection test, a day of deliveries, late rows, the day's snapshot, a rotation of the SAS
  and a move, read back by the bucket audit (every source row once, verify clean) and by
  ``seqexport verify az://...`` with a read SAS;
* a SAS that may not create is refused naming the field, and one the store refuses fails the
  connection test in the customer's words; nothing is saved and nothing is written;
* the fault scenarios that matter for a create-only store (a store error on every attempt, a reset
  mid-upload, an answer lost after the blob landed, a revoked SAS) through the fault proxy;
* the CLI and the HTTP API take Azure like the others; DuckDB reads the files with its ``azure``
  extension, from Azurite, as the customer docs' statements do.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import json
import logging
import re
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster import cli
from seqexport_dagster.contract.keys import parse_key
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, Window, day_of
from seqexport_dagster.delivery.connection_test import ConnectionTestFailed
from seqexport_dagster.delivery.reconcile import reconcile
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.azure import AzureDestination
from seqexport_dagster.destination.azure_errors import azure_answer, translate_answer
from seqexport_dagster.destination.azure_sas import parse_sas
from seqexport_dagster.destination.base import PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3_errors import Place
from seqexport_dagster.errors import AccessDenied, InvalidInput, RetryableError
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.presentation import export_json
from seqexport_dagster_tests.support import azurite as az
from seqexport_dagster_tests.support import duckdb_httpfs
from seqexport_dagster_tests.support.api_server import mint, serve_thread
from seqexport_dagster_tests.support.bucket_audit import audit_export
from seqexport_dagster_tests.support.cli_harness import Cli, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.faults import proxy as fp
from seqexport_dagster_tests.support.late_rows import late_rows
from seqexport_dagster_tests.support.world import DAY0, World

ACCOUNT = az.ACCOUNT
LAG = 120_000
PREFIX = "sequenzy"
SCALE = Scale(subscribers=20, email_sends_per_hour=10, sms_sends_per_hour=2, custom_per_hour=2)
DAY = day_of(DAY0)
W12 = Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS)
LATE = Window(DAY0 + 2 * HOUR_MS, DAY0 + 3 * HOUR_MS)


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[az.Azurite]:
    server = az.start(tmp_path_factory.mktemp("azurite"))
    try:
        yield server
    finally:
        server.stop()


def new_container(azurite: az.Azurite) -> str:
    name = f"exports-{secrets.token_hex(5)}"
    azurite.create_container(name)
    return name


def settings(azurite: az.Azurite, container: str, sas: str, **extra: Any) -> dict[str, Any]:
    return {
        "account_id": "acme",
        "provider": "azure",
        "bucket": container,
        "prefix": PREFIX,
        "endpoint": azurite.endpoint,
        "access_key_id": ACCOUNT,
        "secret_access_key": sas,
        "datasets": ["email_events", "custom_events", "subscribers"],
        "frequency": "1h",
        "lag_ms": LAG,
        **extra,
    }


def test_a_day_late_rows_snapshot_rotation_and_move_through_a_create_only_sas(
    world: World, azurite: az.Azurite, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = new_container(azurite), new_container(azurite)
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS + 4 * HOUR_MS, scale=SCALE)
    exports = Exports(world.store, world.policy, clock=world.clock)
    sas = az.container_sas(first, "c")
    export = exports.create(**settings(azurite, first, sas))
    assert export.provider == "azure" and export.endpoint == azurite.endpoint and export.access_key_id == ACCOUNT
    (test_file,) = azurite.blobs(first)
    assert test_file.startswith(f"{PREFIX}/_sequenzy/connection-test-")

    # A day of hourly runs, the day's snapshot, then late rows.
    runner = world.runner(part_limit=10)
    for hour in range(1, 25):
        world.clock.now_ms = DAY0 + hour * HOUR_MS + LAG
        for dataset in ("email_events", "custom_events"):
            assert len(runner.run_day(export.id, dataset, DAY).windows) == 1
    runner.write_snapshot(export.id, DAY)
    before = set(azurite.blobs(first, PREFIX + "/email_events/"))
    insert_rows(world.source_engine, "email_events", late_rows(LATE, 3, "azure"))
    world.clock.advance(5 * MINUTE_MS)
    assert any(r.changed for r in reconcile(runner, export.id, lookback_ms=DAY_MS))
    added = set(azurite.blobs(first, PREFIX + "/email_events/")) - before
    assert len(added) == 1
    (late_key,) = added
    numbers = [parse_key(k[len(PREFIX) + 1 :]) for k in before if f"-{LATE.from_ms}-{LATE.to_ms}-" in k]
    late = parse_key(late_key[len(PREFIX) + 1 :])
    assert late is not None and late.part is not None
    assert late.part == max(n.part for n in numbers if n is not None and n.part is not None) + 1  # numbered on

    listing = azurite.listing(first, PREFIX)
    blobs = azurite.blobs(first, PREFIX)
    for blob in listing:  # Put Blob in one shot (block blobs, no block lists), each with its MD5
        body = blobs[blob["Key"]]
        assert blob["BlobType"] == "BlockBlob"
        assert blob["ContentMD5"] == base64.b64encode(hashlib.md5(body).digest()).decode()
        folder = blob["Key"][len(PREFIX) + 1 :].split("/", 1)[0]
        if folder != "_sequenzy":
            assert blob["Key"].endswith((".jsonl.gz", "/_SUCCESS")), blob["Key"]
    success = [k for k in blobs if k.endswith("/subscribers/date=2026-09-30/_SUCCESS")]
    assert len(success) == 1 and blobs[success[0]] == b""
    audit = audit_export(world.store, world.source_engine, azurite.s3_view(), export.id)
    audit.assert_clean()
    assert audit.datasets["email_events"].expected > 100

    # Rotation: a new SAS for the same container, tested first; the old one is gone from the store.
    rotated = az.container_sas(first, "c", expiry=dt.datetime.now(dt.UTC) + dt.timedelta(hours=3))
    record = exports.change_destination(export.id, secret_access_key=rotated)
    config, _ = world.store.destination_config(export.id)
    assert config.secret_access_key == rotated and record.destination_version == export.destination_version + 1

    # The move: tested at the new container, then the next day's windows and the late rows go there.
    moved = az.container_sas(second, "c")
    record = exports.change_destination(export.id, bucket=second, secret_access_key=moved)
    assert record.bucket == second and record.endpoint == azurite.endpoint
    world.clock.now_ms = DAY0 + DAY_MS + 3 * HOUR_MS + LAG
    assert runner.run_day(export.id, "email_events", day_of(DAY0 + DAY_MS)).position_ms == DAY0 + DAY_MS + 3 * HOUR_MS
    insert_rows(world.source_engine, "email_events", late_rows(LATE, 2, "moved"))
    world.clock.advance(5 * MINUTE_MS)
    reconcile(runner, export.id, lookback_ms=2 * DAY_MS)
    here = azurite.blobs(second, PREFIX + "/email_events/")
    assert [k for k in here if f"-{LATE.from_ms}-{LATE.to_ms}-" in k], "late rows of a moved window land here"
    monkeypatch.setenv("READ_SAS", az.container_sas(second, "rl"))
    argv = ["verify", f"az://{second}/{PREFIX}", "--endpoint", azurite.endpoint, "--access-key-id", ACCOUNT]
    code = cli.main([*argv, "--secret-env", "READ_SAS", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    assert report["datasets"]["email_events"]["continued"] == 1
    assert azurite.blobs(first, PREFIX + "/email_events/date=2026-10-01/") == {}

    # No SAS anywhere it could be read back.
    shown = json.dumps(export_json(world.store.get_export(export.id)))
    for token in (sas, rotated, moved):
        assert az.signature(token) not in shown


def test_a_sas_that_may_not_create_is_refused_and_nothing_is_saved(world: World, azurite: az.Azurite) -> None:
    container = new_container(azurite)
    exports = Exports(world.store, world.policy, clock=world.clock)
    read_only = az.container_sas(container, "rl")
    with pytest.raises(InvalidInput) as refused:
        exports.create(**settings(azurite, container, read_only))
    assert refused.value.field == "secret_access_key" and "create (c) permission" in refused.value.message
    # Tokens with the right shape that the store refuses: the connection test fails in its words.
    expired = az.container_sas(container, "c", expiry=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    cases = [
        (az.container_sas("another-container", "c"), container, "refused the SAS token"),
        (expired, container, "the SAS token expired at"),
        (az.container_sas("no-such-container", "c"), "no-such-container", "container no-such-container does not exist"),
    ]
    for token, where, words in cases:
        with pytest.raises(ConnectionTestFailed) as failed:
            exports.create(**settings(azurite, where, token))
        assert words in str(failed.value), str(failed.value)
        assert az.signature(token) not in str(failed.value) and "sig=" not in str(failed.value)
    assert world.store.list_exports() == [] and azurite.blobs(container) == {}

    # The store's own refusal of a token without the create permission, in the customer's words.
    answer = _raw_put(azurite, container, "probe.txt", b"x", read_only)
    assert (answer.status, answer.code) == (403, "AuthorizationPermissionMismatch")
    place = Place(azurite.endpoint, container, "", "", ACCOUNT, secret=read_only)
    error = translate_answer(
        answer, "probe.txt", place, parse_sas(az.container_sas(container, "rw")), dt.datetime.now(dt.UTC)
    )
    assert isinstance(error, AccessDenied) and "needs the create (c) permission" in str(error)
    assert azurite.blobs(container) == {}


def _raw_put(azurite: az.Azurite, container: str, name: str, body: bytes, sas: str) -> Any:
    request = urllib.request.Request(f"{azurite.endpoint}/{ACCOUNT}/{container}/{name}?{sas}", data=body, method="PUT")
    for key, value in {"x-ms-version": az.SAS_VERSION, "x-ms-blob-type": "BlockBlob"}.items():
        request.add_header(key, value)
    try:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
    except urllib.error.HTTPError as exc:
        return azure_answer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())
    raise AssertionError("the store accepted the put")


def test_a_resent_blob_is_never_overwritten_and_the_sas_never_logged(
    azurite: az.Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    container = new_container(azurite)
    policy = OperatorPolicy(allow_local=True)
    for permissions in ("c", "cw"):
        sas = az.container_sas(container, permissions)
        config = DestinationConfig(
            "azure", container, PREFIX, endpoint=azurite.endpoint, access_key_id=ACCOUNT, secret_access_key=sas
        )
        destination = AzureDestination(config, policy)
        key = f"{PREFIX}/_sequenzy/resend-{permissions}.txt"
        with caplog.at_level(logging.DEBUG, logger="urllib3"):
            assert destination.put(key, b"first") == PutOutcome.CREATED
            if permissions == "c":  # Azure checks the permission first: 403, never 409, under create-only
                with pytest.raises(AccessDenied) as denied:
                    destination.put(key, b"first")
                assert not denied.value.outcome_unknown and "never overwritten" in str(denied.value)
            else:  # a write SAS meets the precondition: 409 BlobAlreadyExists
                assert destination.put(key, b"second") == PutOutcome.EXISTED
        assert azurite.get(container, key) == b"first"
        destination.close()
        assert az.signature(sas) not in caplog.text
    assert "sig=***" in caplog.text  # urllib3 logged the URLs, scrubbed


@pytest.fixture
def proxy(azurite: az.Azurite) -> Iterator[fp.FaultProxy]:
    server = fp.FaultProxy(azurite.port)
    server.store_answers_existing = True  # Azurite answers a create of an existing blob itself
    try:
        yield server
        assert server.overwrites == [], f"PUTs without If-None-Match to an existing blob: {server.overwrites}"
    finally:
        server.close()


def _fault_export(world: World, azurite: az.Azurite, proxy: fp.FaultProxy, permissions: str = "c") -> Any:
    container = new_container(azurite)
    config = DestinationConfig(
        "azure", container, PREFIX, endpoint=proxy.endpoint, access_key_id=ACCOUNT,
        secret_access_key=az.container_sas(container, permissions),
    )  # fmt: skip
    generate_account(world.source_engine, "acme", DAY0 - HOUR_MS, DAY0 + 4 * HOUR_MS, scale=SCALE)
    return world.store.create_export(
        account_id="acme", destination=config, datasets=("email_events",), frequency="1h", lag_ms=LAG, now_ms=DAY0
    )


def _fast(config: DestinationConfig, policy: OperatorPolicy) -> AzureDestination:
    return AzureDestination(config, policy, read_timeout=5.0, connect_timeout=2.0, max_attempts=2)


def _runner(world: World) -> Any:
    factory: Callable[..., Any] = _fast
    return world.runner(part_limit=10, destination_factory=factory)


@pytest.mark.parametrize("permissions", ["c", "cw"])
def test_an_answer_lost_after_the_blob_landed_is_recognised(
    world: World, azurite: az.Azurite, proxy: fp.FaultProxy, permissions: str
) -> None:
    """The put lands, its answer is lost, the re-send meets the blob: 403 under a create-only SAS
    (the runner's probe then shows the token may still create: the part had landed), 409 under a
    write SAS. Either way the window commits once, with the same bytes, and nothing is overwritten."""
    export = _fault_export(world, azurite, proxy, permissions)
    runner = _runner(world)
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    runner.run_day(export.id, "email_events", DAY)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + LAG
    target = f"email_events-{W12.from_ms}-{W12.to_ms}-0001"
    lost = proxy.add(fp.lost_reply(match=target, times=1))
    report = runner.run_day(export.id, "email_events", DAY)
    assert lost.fired == 1
    assert [r.status for r in proxy.puts(target)] == [201, 403 if permissions == "c" else 409]
    (w12,) = [w for w in report.windows if w.window == W12]
    assert w12.sent.existed == 1
    if permissions == "c":
        assert [r.status for r in proxy.puts("/_sequenzy/connection-test-probe-")] == [201]
    audit_export(world.store, world.source_engine, azurite.s3_view(), export.id).assert_clean()


def test_store_faults_and_a_revoked_sas(world: World, azurite: az.Azurite, proxy: fp.FaultProxy) -> None:
    """A 503 on every attempt fails the window (retryable) and the retry rewrites it under the same
    names; a reset mid-upload is absorbed inside the put; a SAS revoked (403) fails permanently in
    the customer's words until access returns."""
    export = _fault_export(world, azurite, proxy)
    runner = _runner(world)
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    runner.run_day(export.id, "email_events", DAY)
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + LAG
    target = f"email_events-{W12.from_ms}-{W12.to_ms}-0001"
    busy = proxy.add(fp.Fault("status", match=target, times=None, status=503, code="ServerBusy", message="busy"))
    with pytest.raises(RetryableError, match="ServerBusy"):
        runner.run_day(export.id, "email_events", DAY)
    assert len(proxy.puts(target)) == 2
    proxy.remove(busy)
    proxy.add(fp.reset(match=target, times=1))
    world.clock.now_ms = world.store.get_export(export.id).dataset_state("email_events").next_retry_at  # type: ignore[union-attr]
    runner.run_day(export.id, "email_events", DAY)
    assert [r.status for r in proxy.puts(target)][-2:] == [0, 201]

    world.clock.now_ms = DAY0 + 4 * HOUR_MS + LAG
    message = "This request is not authorized to perform this operation using this permission."
    revoked = proxy.add(
        fp.Fault("status", times=None, status=403, code="AuthorizationPermissionMismatch", message=message)
    )
    with pytest.raises(AccessDenied, match="needs the create"):
        runner.run_day(export.id, "email_events", DAY)
    state = world.store.get_export(export.id).dataset_state("email_events")
    assert state is not None and state.failures == 1 and "create (c) permission" in (state.last_error or "")
    proxy.remove(revoked)
    world.clock.now_ms = max(world.clock(), state.next_retry_at or 0)
    runner.run_day(export.id, "email_events", DAY)
    audit_export(world.store, world.source_engine, azurite.s3_view(), export.id).assert_clean()


def test_cli_http_api_and_duckdb_take_azure(azurite: az.Azurite, run_sqlite: Cli, tmp_path: Path) -> None:
    """`seqexport create --provider azure` and `destination` (a new SAS), the HTTP API's create, and
    the customer docs' DuckDB statements (its ``azure`` extension) reading the parts from Azurite."""
    container = new_container(azurite)
    run = run_sqlite
    world = run.world
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 3 * HOUR_MS, scale=SCALE)
    first, second = az.container_sas(container, "c"), az.container_sas(container, "c")
    env = {**run.env, "AZURE_SAS": first, "AZURE_SAS_2": second}
    argv = ["create", "--account", "acme", "--provider", "azure", "--bucket", container, "--prefix", PREFIX]
    argv += ["--endpoint", azurite.endpoint, "--access-key-id", ACCOUNT, "--datasets", "email_events,subscribers"]
    created = run(*argv, "--format", "parquet", "--secret-env", "AZURE_SAS", "--json", env=env)
    assert created.code == 0, created
    shown = created.json
    assert shown["provider"] == "azure" and shown["bucket"] == container
    rotated = run("destination", shown["id"], "--secret-env", "AZURE_SAS_2", "--json", env=env)
    assert rotated.code == 0, rotated
    for result in (created, rotated):
        assert (
            az.signature(first) not in result.out + result.err and az.signature(second) not in result.out + result.err
        )
    world.clock.now_ms = DAY0 + 3 * HOUR_MS + LAG
    world.runner().run_day(shown["id"], "email_events", DAY)
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    world.runner().write_snapshot(shown["id"], DAY)

    exports = Exports(world.store, world.policy, clock=world.clock)
    with serve_thread(exports) as server:
        body = {k: v for k, v in settings(azurite, container, first, prefix="api").items() if k != "account_id"}
        answer = server.client(mint(exports, "acme")).post("/v1/exports", json=body)
        assert answer.status_code == 201, answer.text
        assert answer.json()["provider"] == "azure" and az.signature(first) not in answer.text
        refused = server.client(mint(exports, "acme")).post(
            "/v1/exports", json={**body, "secret_access_key": az.container_sas(container, "r")}
        )
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "secret_access_key"

    # The docs' DuckDB block, as written but for the emulator's endpoint, account and token (a SAS
    # that may read and list) and the packaged extension in place of INSTALL/LOAD.
    block = _doc_block("#### Reading `az://` from DuckDB", "INSTALL azure;")
    block = block.replace("https://acmedata.blob.core.windows.net", f"{azurite.endpoint}/{ACCOUNT}")
    block = block.replace("sv=2021-08-06&si=sequenzy-read&sr=c&sig=...", az.container_sas(container, "rl"))
    block = block.replace("az://acme-exports/sequenzy/", f"az://{container}/{PREFIX}/")
    block = block.replace("email_events/*/*.jsonl.gz", "email_events/*/*.parquet").replace(
        "read_json_auto", "read_parquet"
    )
    statements = [s.strip() for s in (block + "\n").split(";\n") if s.strip() and not s.startswith(("INSTALL", "LOAD"))]
    where = f"az://{container}/{PREFIX}"
    done = duckdb_httpfs.run(
        statements[:-1],
        [
            statements[-1],
            f"SELECT count(*), count(DISTINCT id) FROM read_parquet('{where}/email_events/*/*.parquet')",
            f"SELECT count(*) FROM read_parquet('{where}/subscribers/date=2026-09-30/*.parquet')",
        ],
        extensions=("azure",),
    )
    by_type, ((events, unique),), ((subscribers,),) = done["results"]
    assert sum(int(n) for _, n in by_type) == int(events) == int(unique) > 0
    assert int(subscribers) == SCALE.subscribers
    parts = [k for k in azurite.blobs(container, f"{PREFIX}/email_events/") if k.endswith(".parquet")]
    total = sum(_parquet_rows(azurite.get(container, k)) for k in parts)
    assert total == int(events)


def _doc_block(heading: str, start: str) -> str:
    doc = (Path(__file__).parents[1] / "docs" / "customers.md").read_text()
    section = doc[doc.index(heading) :]
    return next(b for b in re.findall(r"```sql\n(.*?)\n```", section, re.S) if b.startswith(start))


def test_the_azure_loading_statements_parse() -> None:
    """The Snowflake stage and the Synapse/Fabric COPY INTO of docs/customers.md, parsed by sqlglot in
    each vendor's dialect (no account of either runs here)."""
    import sqlglot

    heading = "### Azure Blob Storage: Snowflake, Synapse and Fabric"
    stage = sqlglot.parse_one(_doc_block(heading, "CREATE STAGE"), read="snowflake")
    assert "azure://acmedata.blob.core.windows.net/acme-exports/sequenzy/" in stage.sql(dialect="snowflake")
    copy = sqlglot.parse_one(_doc_block(heading, "COPY INTO"), read="tsql")
    assert isinstance(copy, sqlglot.exp.Copy) and "FILE_TYPE = 'PARQUET'" in copy.sql(dialect="tsql")


def _parquet_rows(body: bytes) -> int:
    import io

    import pyarrow.parquet as pq

    return int(pq.read_metadata(io.BytesIO(body)).num_rows)


def test_gzip_parts_round_trip(azurite: az.Azurite) -> None:
    """A part body goes up and comes back byte for byte (gzip, as written)."""
    container = new_container(azurite)
    config = DestinationConfig(
        "azure", container, PREFIX, endpoint=azurite.endpoint, access_key_id=ACCOUNT,
        secret_access_key=az.container_sas(container, "c"),
    )  # fmt: skip
    body = gzip.compress(b'{"id":"eev_1"}\n')
    destination = AzureDestination(config, OperatorPolicy(allow_local=True))
    key = f"{PREFIX}/email_events/date=2026-09-30/email_events-1-2-0000.jsonl.gz"
    assert destination.put(key, body) == PutOutcome.CREATED
    assert azurite.get(container, key) == body
    assert azurite.properties(container, key)["content-type"] == "application/gzip"
