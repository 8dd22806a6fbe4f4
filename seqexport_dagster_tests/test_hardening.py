"""Hardening: keys fail closed, the seal is bound to the destination, rotation survives a bad row,
endpoints refuse service ports, connection tests are rate-limited, the input gaps are closed, and no
repr shows a secret. Everything a customer or operator does goes through `seqexport` in-process."""

from __future__ import annotations

import base64
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.endpoint import validate_endpoint
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import RateLimited, SecretKeyError
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.rate_limit import LIMIT, WINDOW_MS
from seqexport_dagster.store.tables import exports
from seqexport_dagster_tests.support.cli_harness import (  # noqa: F401
    Cli,
    cli_world,
    control_plane_rows,
    env_for,
    files_under,
    run_fixture,
    run_sqlite_fixture,
)
from seqexport_dagster_tests.support.processes import ROOT
from seqexport_dagster_tests.support.world import World

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
STRICT = OperatorPolicy()


def s3_config(bucket: str = "acme-exports", **changes: Any) -> DestinationConfig:
    values: dict[str, Any] = {
        "provider": "s3",
        "bucket": bucket,
        "prefix": "sequenzy",
        "region": "us-east-1",
        "endpoint": "https://minio.example.com:9000",
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": SECRET,
    }
    values.update(changes)
    return DestinationConfig(**values)


def create(world: World, account: str = "acme", destination: DestinationConfig | None = None) -> str:
    return world.store.create_export(
        account_id=account,
        destination=destination or s3_config(),
        datasets=("email_events",),
        frequency="1h",
        lag_ms=120_000,
        now_ms=world.clock(),
    ).id


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------- finding 2: keys fail closed


def test_missing_keys_outside_local_mode_exit_6_and_create_nothing(run_sqlite: Cli, tmp_path: Path) -> None:
    home = tmp_path / "fresh-home"
    env = {"SEQEXPORT_HOME": str(home)}  # no SEQEXPORT_SECRET_KEYS, no SEQEXPORT_ALLOW_LOCAL: production
    create_argv = ("create", "--account", "acme", "--bucket", "acme-exports", "--region", "us-east-1")
    result = run_sqlite(
        *create_argv, "--access-key-id", "AKIAEXAMPLE", "--secret-stdin", "--json", stdin=SECRET + "\n", env=env
    )
    assert result.code == 6, result
    message = result.json["error"]["message"]
    assert "SEQEXPORT_SECRET_KEYS is not set" in message and "SEQEXPORT_ALLOW_LOCAL=1" in message
    assert SECRET not in result.out + result.err
    # Any other command on a fresh home is refused as well (no control plane there, issue 17).
    assert run_sqlite("list", "--json", env=env).code == 6
    assert not home.exists(), "no key file, no control plane, no folder"
    assert not Path(".seqexport").exists()

    # An existing control plane: the same refusal, and nothing in it changes.
    before = control_plane_rows(run_sqlite.world.control_engine)
    env = {k: v for k, v in run_sqlite.env.items() if k not in ("SEQEXPORT_SECRET_KEYS", "SEQEXPORT_ALLOW_LOCAL")}
    result = run_sqlite(*create_argv, "--access-key-id", "AKIAEXAMPLE", "--secret-stdin", stdin=SECRET + "\n", env=env)
    assert result.code == 6 and "SEQEXPORT_SECRET_KEYS is not set" in result.err
    assert control_plane_rows(run_sqlite.world.control_engine) == before
    # Unusable keys are a configuration error too.
    for bad in ("k1:" + base64.b64encode(b"short").decode(), "no-colon", ",", "k1:!!!"):
        result = run_sqlite("list", env={**env, "SEQEXPORT_SECRET_KEYS": bad})
        assert result.code == 6 and "SEQEXPORT_SECRET_KEYS" in result.err, (bad, result)


def test_local_mode_key_file_and_control_plane_are_owner_only(run_sqlite: Cli, tmp_path: Path) -> None:
    home = tmp_path / "local-home"
    env = {"SEQEXPORT_HOME": str(home), "SEQEXPORT_ALLOW_LOCAL": "1"}
    assert run_sqlite("init", env=env).code == 0
    assert run_sqlite("list", env=env).code == 0
    key, db = home / "secret.key", home / "control.db"
    assert mode(home) == 0o700 and mode(key) == 0o600 and mode(db) == 0o600
    assert all(mode(p) & 0o077 == 0 for p in home.iterdir()), {p.name: oct(mode(p)) for p in home.iterdir()}

    key.chmod(0o644)
    result = run_sqlite("list", "--json", env=env)
    assert result.code == 6, result
    assert f"chmod 600 {key}" in result.json["error"]["message"]
    key.chmod(0o600)
    # A control plane someone left readable is tightened when it is opened.
    db.chmod(0o644)
    home.chmod(0o755)
    assert run_sqlite("list", env=env).code == 0
    assert mode(db) == 0o600 and mode(home) == 0o700


def test_dagster_resource_fails_closed_without_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from seqexport_dagster.defs.resources import ControlPlaneResource

    for name in ("SEQEXPORT_SECRET_KEYS", "SEQEXPORT_ALLOW_LOCAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SEQEXPORT_HOME", str(tmp_path / "home"))
    with pytest.raises(SecretKeyError, match="SEQEXPORT_SECRET_KEYS is not set"):
        ControlPlaneResource(database_url=f"sqlite:///{tmp_path / 'c.db'}").box()
    assert not (tmp_path / "home").exists()


# ---------------------------------------------------------------- finding 6: the seal's binding


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("bucket", "attacker-bucket"),
        ("endpoint", "https://attacker.example.com"),
        ("access_key_id", "AKIAATTACKER"),
        ("provider", "gcs"),
    ],
)
def test_repointing_the_row_makes_the_secret_not_open(run: Cli, column: str, value: str) -> None:
    world = run.world
    export_id = create(world)
    with world.control_engine.begin() as conn:
        conn.execute(exports.update().where(exports.c.id == export_id).values({column: value}))
    with pytest.raises(SecretKeyError) as info:
        world.store.destination_config(export_id)
    assert "does not open" in str(info.value) and SECRET not in str(info.value)
    # Through the CLI: a destination change must read the current secret, and refuses (exit 6).
    result = run("destination", export_id, "--prefix", "elsewhere", "--json")
    # The HTTP API answers a key problem with a fixed 503 text (its log gets the type).
    expected = "unavailable" if run.remote else "does not open"
    assert result.code == 6 and expected in result.json["error"]["message"], result
    assert SECRET not in result.out + result.err
    # Put back, it opens again: the binding, not the data, refused it.
    original = {"bucket": "acme-exports", "endpoint": "https://minio.example.com:9000"}
    original |= {"access_key_id": "AKIAEXAMPLE", "provider": "s3"}
    with world.control_engine.begin() as conn:
        conn.execute(exports.update().where(exports.c.id == export_id).values({column: original[column]}))
    assert world.store.destination_config(export_id)[0].secret_access_key == SECRET


def test_destination_change_reseals_for_the_new_destination(world: World) -> None:
    export_id = create(world)
    world.store.update_destination(export_id, s3_config("acme-new"), world.clock())
    config, _ = world.store.destination_config(export_id)
    assert config.bucket == "acme-new" and config.secret_access_key == SECRET


@pytest.fixture(name="local_run", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def local_run_fixture(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """`seqexport` on the operator's machine: rotation takes the keys from its own environment (an API
    server keeps the keys it started with)."""
    with cli_world(request.param, tmp_path) as (world, spec):
        yield Cli(world, env_for(world, spec), spec, capsys, monkeypatch)


def test_rotation_reports_a_row_it_cannot_open_and_goes_on(local_run: Cli) -> None:
    run = local_run
    world = run.world
    good = create(world, "acme")
    bad = create(world, "globex", s3_config("globex-exports", secret_access_key="another-secret"))
    with world.control_engine.begin() as conn:
        conn.execute(exports.update().where(exports.c.id == bad).values(bucket="attacker-bucket"))
    new_spec = new_key_spec("t2")
    both = {**run.env, "SEQEXPORT_SECRET_KEYS": f"{new_spec},{run.key_spec}"}
    result = run("rotate-keys", "--json", env=both)
    assert result.code == 6, result
    assert result.json["resealed"] == 1
    [failed] = result.json["failed"]
    assert failed["export_id"] == bad and "does not open" in failed["error"]
    text = run("rotate-keys", env=both)
    assert text.code == 6 and f"NOT re-sealed: export {bad}" in text.out and "Re-sealed 0 secret(s)" in text.out
    new_only = ControlPlane(world.control_engine, SecretBox.parse(new_spec))
    assert new_only.destination_config(good)[0].secret_access_key == SECRET
    # The bad row is untouched: put right, it still opens with the old key.
    with world.control_engine.begin() as conn:
        conn.execute(exports.update().where(exports.c.id == bad).values(bucket="globex-exports"))
    assert world.store.destination_config(bad)[0].secret_access_key == "another-secret"
    assert run.ok("rotate-keys", env=both) == {"resealed": 1, "failed": []}


def _seal_v1(box: SecretBox, plaintext: str, export_id: str) -> str:
    """The pre-0003 format: associated data is the export id only."""
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(box.keys[box.primary]).encrypt(nonce, plaintext.encode(), export_id.encode())
    enc = [base64.urlsafe_b64encode(b).decode().rstrip("=") for b in (nonce, sealed)]
    return ".".join(("v1", box.primary, *enc))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_migration_0003_reseals_old_rows_and_reports_the_rest(tmp_path: Path, backend: str) -> None:
    from alembic import command
    from alembic.config import Config

    from seqexport_dagster_tests.support.world import postgres_database

    box = SecretBox.parse(new_key_spec("t1"))
    lost = SecretBox.parse(new_key_spec("gone"))

    def check(url: str) -> None:
        engine = create_engine(url)
        cfg = Config()
        cfg.set_main_option("script_location", str(ROOT / "seqexport_dagster" / "store" / "migrations"))
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0001")
        rows = {"exp_old": ("acme", box), "exp_lost": ("globex", lost)}
        with engine.begin() as conn:
            for export_id, (account, sealing) in rows.items():
                conn.execute(
                    exports.insert().values(
                        id=export_id,
                        account_id=account,
                        provider="s3",
                        bucket=f"{account}-exports",
                        region="us-east-1",
                        endpoint=None,
                        prefix="",
                        access_key_id="AKIAEXAMPLE",
                        secret_ciphertext=_seal_v1(sealing, f"secret-of-{account}", export_id),
                        frequency="1h",
                        lag_ms=120_000,
                        status="active",
                        created_at=1,
                        updated_at=1,
                    )
                )
        store = ControlPlane(engine, box)
        store.migrate()
        with engine.connect() as conn:
            tokens = dict(conn.execute(sa.select(exports.c.id, exports.c.secret_ciphertext)).all())
        assert tokens["exp_old"].startswith("v2.t1.") and tokens["exp_lost"].startswith("v1.gone.")
        assert store.destination_config("exp_old")[0].secret_access_key == "secret-of-acme"
        # A v1 row is never opened by a run; it says how to fix it.
        with pytest.raises(SecretKeyError, match="rotate-keys"):
            store.destination_config("exp_lost")
        report = store.rotate_secrets()
        assert report.resealed == 0 and [e for e, _ in report.failed] == ["exp_lost"]
        # With the lost key back, rotate-keys upgrades it.
        both = ControlPlane(engine, SecretBox.parse(f"{new_key_spec('t2')},{_spec(box)},{_spec(lost)}"))
        assert both.rotate_secrets().resealed == 2
        assert both.destination_config("exp_lost")[0].secret_access_key == "secret-of-globex"
        engine.dispose()

    if backend == "sqlite":
        check(f"sqlite:///{tmp_path / 'control.db'}")
    else:
        with postgres_database() as url:
            check(url)


def _spec(box: SecretBox) -> str:
    return f"{box.primary}:{base64.b64encode(box.keys[box.primary]).decode()}"


# ---------------------------------------------------------------- finding 7: ports and rate limit


@pytest.mark.parametrize("port", [21, 22, 23, 25, 53, 110, 143, 389, 445, 587, 993, 1433, 3306, 3389, 5432, 6379,
                                  9042, 9200, 11211, 27017, 80, 8, 8080, 8443, 3000, 9090])  # fmt: skip
def test_ports_outside_the_allow_list_are_refused(port: int) -> None:
    with pytest.raises(
        Exception, match=f"port {port} is not accepted on this deployment; use one of 443, 9000"
    ) as info:
        validate_endpoint(f"https://minio.example.com:{port}", STRICT)
    assert type(info.value).__name__ == "InvalidInput" and info.value.field == "endpoint"  # type: ignore[attr-defined]


@pytest.mark.parametrize("port", [443, 9000])
def test_allowed_ports_are_accepted(port: int) -> None:
    expected = "https://minio.example.com" + ("" if port == 443 else f":{port}")
    assert validate_endpoint(f"https://minio.example.com:{port}", STRICT) == expected


def test_connection_tests_are_rate_limited_per_account(run_sqlite: Cli) -> None:
    from seqexport_dagster.clock import wall_clock_ms

    run = run_sqlite
    run.world.clock.now_ms = wall_clock_ms()  # the other process below counts on the wall clock
    for i in range(LIMIT):
        run.create_local(f"b{i}")
    before = control_plane_rows(run.world.control_engine)
    files = files_under(run.world.root)
    refused = run("create", "--account", "acme", "--provider", "local", "--bucket", str(run.world.root / "x"), "--json")
    assert refused.code == 8, refused
    error = refused.json["error"]
    assert error["type"] == "rate_limited" and "try again in 15 minute(s)" in error["message"]
    assert control_plane_rows(run.world.control_engine) == before and files_under(run.world.root) == files
    # A destination change is a connection test too.
    export_id = run.ok("list")[0]["id"]
    assert run("destination", export_id, "--prefix", "moved").code == 8
    # Another process sees the same count (it is kept in the control plane).
    env = {**os.environ, **run.env, "PYTHONPATH": str(ROOT)}
    other = subprocess.run(
        [sys.executable, "-m", "seqexport_dagster.cli", "create", "--account", "acme", "--provider", "local",
         "--bucket", str(run.world.root / "y")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert other.returncode == 8, other.stderr
    # Other accounts are not affected; the limit rolls off after its window.
    run.create_local("globex-folder", account="globex")
    run.world.clock.advance(WINDOW_MS)
    run.create_local("later")


def test_rate_limit_counts_across_connections(world: World) -> None:
    from seqexport_dagster.store.rate_limit import admit_connection_test

    engines = [create_engine(world.control_url) for _ in range(2)]
    try:
        for i in range(LIMIT):
            admit_connection_test(engines[i % 2], "acme", world.clock())
        with pytest.raises(RateLimited) as info:
            admit_connection_test(engines[0], "acme", world.clock())
        assert info.value.retry_after_ms == WINDOW_MS
    finally:
        for engine in engines:
            engine.dispose()


# ---------------------------------------------------------------- finding 5: the input gaps

S3 = ("create", "--account", "acme", "--bucket", "acme-exports", "--region", "us-east-1")
MINIO = ("create", "--account", "acme", "--bucket", "acme-exports", "--endpoint", "https://minio.example.com:9000")
KEY = ("--access-key-id", "AKIAEXAMPLE000000001", "--secret-env", "GOOD_SECRET")

# (case, argv ({A}: an active export), field, message)
GAPS: list[tuple[str, tuple[str, ...], str, str]] = [
    ("account with a trailing newline", ("create", "--account", "acme\n", "--bucket", "acme-exports", "--region",
     "us-east-1", *KEY), "account", "is not an account id"),
    ("export id with a trailing newline", ("status", "{A}\n"), "export_id", "is not an export id"),
    ("free-text region, S3-compatible", (*MINIO, "--region", "eu west 1", *KEY), "region", "is not a region name"),
    ("free-text region, gcs", ("create", "--account", "acme", "--provider", "gcs", "--bucket", "acme-exports",
     "--region", "Europe (Frankfurt)", *KEY), "region", "is not a region name"),
    ("region with a trailing newline", ("create", "--account", "acme", "--bucket", "acme-exports", "--region",
     "us-east-1\n", *KEY), "region", "is not a region name"),
    ("lag 1e308", (*S3, *KEY, "--lag-minutes", "1e308"), "lag", "out of range"),
    ("lag -1e308", (*S3, *KEY, "--lag-minutes=-1e308"), "lag", "out of range"),
    ("lag -1e308, read as an option", (*S3, *KEY, "--lag-minutes", "-1e308"), "lag", "expected one argument"),
    ("lag nan", (*S3, *KEY, "--lag-minutes", "nan"), "lag", "out of range"),
    ("secret given as --secret-env", (*S3, "--access-key-id", "AKIAEXAMPLE000000001", "--secret-env", SECRET),
     "secret", "environment variable given with --secret-env is not set"),
    ("access key id of 5,000 characters", (*S3, "--access-key-id", "A" * 5000, "--secret-env", "GOOD_SECRET"),
     "access_key_id", "is not an access key id: use 1-128 letters"),
    ("access key id with a space", (*S3, "--access-key-id", "AKIA EXAMPLE", "--secret-env", "GOOD_SECRET"),
     "access_key_id", "is not an access key id"),
    ("bucket with a trailing newline", ("create", "--account", "acme", "--bucket", "acme-exports\n", "--region",
     "us-east-1", *KEY), "bucket", "is not a valid bucket name"),
    ("prefix with a trailing newline", (*S3, *KEY, "--prefix", "sequenzy\n"), "prefix", "is not a valid prefix"),
    ("SSH port", (*S3, *KEY, "--endpoint", "https://minio.example.com:22"), "endpoint", "port 22 is not accepted"),
    ("PostgreSQL port", ("destination", "{A}", "--endpoint", "https://db.example.com:5432"), "endpoint",
     "port 5432 is not accepted"),
    ("destination region", ("destination", "{A}", "--region", "us east"), "region", "is not a region name"),
]  # fmt: skip


def test_input_gaps_exit_2_name_the_field_and_save_nothing(run: Cli) -> None:
    active = create(run.world)  # an S3-compatible export (created directly: no store to test against)
    before = control_plane_rows(run.world.control_engine)
    files = files_under(run.world.root)
    env = {**run.env, "GOOD_SECRET": "good-secret-value"}
    env.pop("SEQEXPORT_ALLOW_LOCAL", None)
    for case, argv, field, message in GAPS:
        args = [a.replace("{A}", active) for a in argv]
        result = run(*args, "--json", env=env)
        assert result.code == 2, (case, result)
        error = result.json["error"]
        assert error.get("field") == field and message in error["message"], (case, error)
        assert SECRET not in result.out + result.err, case
        text = run(*args, env=env)
        assert text.code == 2 and text.out == "" and text.err.count("\n") == 1, (case, text)
        assert "Traceback" not in text.err and SECRET not in text.err, case
        assert control_plane_rows(run.world.control_engine) == before, case
        assert files_under(run.world.root) == files, case


# ---------------------------------------------------------------- finding 4: no secret in any repr


def test_no_repr_or_str_shows_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from seqexport_dagster.definitions import default_resources
    from seqexport_dagster.defs.resources import (
        ClockResource,
        ControlPlaneResource,
        ExporterResource,
        OperatorResource,
        SourceResource,
    )
    from seqexport_dagster.delivery.assembly import control_plane_at
    from seqexport_dagster.delivery.connection_test import ConnectionTestFailed
    from seqexport_dagster.destination.s3 import S3Destination
    from seqexport_dagster.errors import BadCredentials
    from seqexport_dagster.management.api import Exports

    key_spec = new_key_spec("planted")
    key_b64 = key_spec.split(":", 1)[1]
    db_password, source_password = "PLANTED-db-pw-4f1e", "PLANTED-src-pw-9a2c"
    planted = [key_spec, key_b64, SECRET, db_password, source_password]
    control_url = f"sqlite:///{tmp_path / 'control.db'}"
    pg_url = f"postgresql+psycopg2://exporter:{db_password}@db.example.com:5432/control"
    source_url = f"postgresql+psycopg2://reader:{source_password}@db.example.com:5432/source"

    def clean(*objects: object) -> None:
        for obj in objects:
            for text in (repr(obj), str(obj)):
                assert not any(p in text for p in planted), (type(obj).__name__, text)

    control_plane = ControlPlaneResource(database_url=control_url, secret_keys=key_spec)
    pg_control_plane = ControlPlaneResource(database_url=pg_url, secret_keys=key_spec)
    source = SourceResource(source_url=source_url)
    exporter = ExporterResource(
        control_plane=control_plane, source=source, operator=OperatorResource(allow_local="1"), clock=ClockResource()
    )
    clean(control_plane, pg_control_plane, source, exporter)
    with dg.build_resources({"control_plane": control_plane, "exporter": exporter, "source": source}) as built:
        store = built.control_plane.store()
        clean(built, built.control_plane, built.exporter, built.source, store, store.box)
        clean(built.exporter.runner())

    # The code location's own resources, bound to dg.EnvVar, resolved with planted values.
    monkeypatch.setenv("SEQEXPORT_SECRET_KEYS", key_spec)
    monkeypatch.setenv("SEQEXPORT_DATABASE_URL", control_url)
    monkeypatch.setenv("SEQEXPORT_SOURCE_URL", source_url)
    monkeypatch.setenv("SEQEXPORT_ALLOW_LOCAL", "1")
    resources = default_resources()
    clean(*resources.values())
    with dg.build_resources(resources) as built:
        clean(built, built.control_plane, built.exporter, built.control_plane.box())

    settings = Settings.from_env({"SEQEXPORT_SECRET_KEYS": key_spec, "SEQEXPORT_DATABASE_URL": pg_url,
                                  "SEQEXPORT_SOURCE_URL": source_url, "SEQEXPORT_HOME": str(tmp_path)})  # fmt: skip
    box = settings.secret_box()
    config = s3_config(endpoint="http://127.0.0.1:9999")
    destination = S3Destination(config, OperatorPolicy(allow_local=True))
    api = Exports(control_plane_at(control_url, key_spec), settings.policy)
    failed = ConnectionTestFailed(config.describe(), BadCredentials("bad signature"))
    clean(settings, box, config, destination, destination._sender, api, api.store, failed, settings.policy)
    destination.close()
    api.close()


# ---------------------------------------------------------------- misc


def test_error_text_is_one_bounded_printable_line() -> None:
    from seqexport_dagster.errors import sanitize_error

    nasty = "a\nb\r\nc\x1b[31md\x00e\u202ef\u2028g\x85h\tz " + "é" * 3000
    out = sanitize_error(nasty)
    assert out.startswith("a b c [31md e f g h z éé") and out.endswith(" [...]")
    assert out.isprintable() and len(out.encode()) <= 1024
    assert sanitize_error("short and fine") == "short and fine"
    assert sanitize_error("\udc80 lone surrogate").isprintable()


@settings(max_examples=150, deadline=None)
@given(
    region=st.one_of(st.from_regex(r"\A[A-Za-z0-9-]{1,64}\Z"), st.text(max_size=70)),
    provider=st.sampled_from(["s3", "gcs"]),
)
def test_every_region_that_validates_builds_a_client(region: str, provider: str) -> None:
    """What validation accepts, botocore accepts too: no InvalidRegionError (exit 1) behind it."""
    from seqexport_dagster.destination.config import validate_config
    from seqexport_dagster.destination.s3 import S3Destination
    from seqexport_dagster.errors import InvalidInput

    endpoint = "https://minio.example.com:9000" if provider == "s3" else None
    try:
        config = validate_config(s3_config(provider=provider, endpoint=endpoint, region=region), STRICT)
    except InvalidInput as exc:
        assert exc.field == "region"
        return
    S3Destination(config, STRICT).close()
