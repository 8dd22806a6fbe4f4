"""Issue 24 on the client side, with the real CLI in a subprocess: the remote CLI keeps its token to
itself (https off loopback, no redirect, bounded answers), redaction matches whole secrets and
whole option values, errors mask the access key id, GCS refuses the fields it ignores, and delete's
refusal names its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqexport_dagster.store.crypto import new_key_spec
from seqexport_dagster_tests.support import hostile_api
from seqexport_dagster_tests.support.measured_cli import Measured, run_measured
from seqexport_dagster_tests.support.moto_server import MotoServer

TOKEN = "sqx_abcdefabcdef_" + "T0kenValueNeverShown" * 2
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
S3 = ("create", "--account", "acme", "--bucket", "acme-exports", "--region", "us-east-1")


def local_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    return {
        "SEQEXPORT_HOME": str(home),
        "SEQEXPORT_DATABASE_URL": f"sqlite:///{tmp_path / 'control.db'}",
        "SEQEXPORT_SECRET_KEYS": new_key_spec("t1"),
        **extra,
    }


def remote(url: str, *argv: str, timeout: float = 120) -> Measured:
    return run_measured(argv, env={"SEQEXPORT_API_URL": url, "SEQEXPORT_API_TOKEN": TOKEN}, timeout=timeout)


def error_of(result: Measured) -> dict[str, object]:
    error: dict[str, object] = json.loads(result.out)["error"]
    return error


# --- the remote CLI -------------------------------------------------------------------------------


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` that no CA signed, and its key."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def test_remote_cli_sends_no_token_to_a_server_whose_certificate_no_ca_signed(tmp_path: Path) -> None:
    """https is verified (certificate and host name) before the request, so an impostor's TLS
    server on the API's address never sees the token: the CLI says it cannot reach the API."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from seqexport_dagster.errors import RetryableError
    from seqexport_dagster.management.remote import RemoteExports

    seen: list[str] = []

    class Impostor(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"[]")

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Impostor)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*self_signed(tmp_path))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = RemoteExports(f"https://localhost:{server.server_port}", TOKEN)
        with pytest.raises(
            RetryableError, match="cannot reach the API at https://localhost:.*SSLCertVerificationError"
        ):
            api.list()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert seen == []


@pytest.mark.parametrize(
    "url", ["http://exports.example.invalid", "http://10.20.30.40:8080", "http://[2001:db8::1]/", "HTTP://exp.invalid"]
)
def test_remote_cli_refuses_plain_http_off_loopback(url: str) -> None:
    """On main the token and a customer's secret went out in plain text to any http:// URL."""
    result = remote(url, "list", "--json", timeout=60)
    assert result.code == 2, result
    error = error_of(result)
    assert error["field"] == "SEQEXPORT_API_URL"
    assert "plain http" in str(error["message"]) or "is not an https:// URL" in str(error["message"])
    assert TOKEN not in result.out + result.err


@pytest.mark.slow
def test_remote_cli_speaks_http_to_loopback_with_its_token(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with hostile_api.running("record", str(log)) as api:
        result = remote(api.url, "list")
    assert result.code == 0 and "No exports." in result.out, result
    (request,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert request["path"].startswith("/v1/exports") and request["headers"]["Authorization"] == f"Bearer {TOKEN}"


def test_remote_cli_keeps_the_path_of_the_api_url_and_sends_its_query(tmp_path: Path) -> None:
    """An API behind a path (``https://host/exports-api``) gets its requests under that path, with
    the query the command asked for, and nothing else of the client's environment."""
    log = tmp_path / "requests.jsonl"
    with hostile_api.running("record", str(log)) as api:
        result = remote(f"{api.url}/exports-api/", "list", "--account", "acme", "--all")
    assert result.code == 0, result
    (request,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert request["method"] == "GET"
    assert request["path"] == "/exports-api/v1/exports?include_deleted=true&account=acme"
    assert request["headers"]["User-Agent"] == "seqexport-cli"
    assert "Cookie" not in request["headers"] and "Proxy-Authorization" not in request["headers"]


@pytest.mark.slow
def test_remote_cli_never_follows_a_redirect_so_the_token_stays(tmp_path: Path) -> None:
    log = tmp_path / "elsewhere.jsonl"
    with hostile_api.running("record", str(log)) as elsewhere, hostile_api.running("redirect", elsewhere.url) as api:
        text = remote(api.url, "status", "exp_0123456789abcdef")
        as_json = remote(api.url, "list", "--json")
    assert text.code == 2 and "(a redirect), which is never followed" in text.err, text
    assert error_of(as_json)["field"] == "SEQEXPORT_API_URL"
    assert not log.exists()  # nothing reached the other server: no token, no request at all


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "said"), [("huge", "announced 1,073,741,824 bytes"), ("huge-unannounced", "sent more")]
)
def test_remote_cli_bounds_the_answers_it_reads(mode: str, said: str) -> None:
    with hostile_api.running(mode) as api:
        result = remote(api.url, "list", "--json", timeout=120)
    assert result.code == 6, result
    assert said in str(error_of(result)["message"])
    assert result.peak_rss_mb <= 200 and result.seconds < 60, result
    print(f"remote CLI, 1 GiB answer ({mode}): peak RSS {result.peak_rss_mb} MB, {result.seconds} s")  # noqa: T201


# --- redaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "argv",
    [
        (*S3, "--secret-access-key=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"),
        ("verify", "s3://b/p", "--secret=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"),
        ("datasets", "add", "exp_0123456789abcdef", "sms_events", "--password=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"),
    ],
)
def test_a_secret_in_the_equals_form_is_never_echoed(argv: tuple[str, ...], as_json: bool) -> None:
    result = run_measured([*argv, *(["--json"] if as_json else [])], timeout=60)
    assert result.code == 2, result
    assert "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY" not in result.out + result.err
    message = str(error_of(result)["message"]) if as_json else result.err
    assert "unrecognized arguments: --" in message and "a secret is never a command-line value" in message


@pytest.mark.slow
def test_redaction_replaces_the_whole_secret_never_a_substring(tmp_path: Path) -> None:
    """A secret ``x`` must not turn ``acme-exports`` into ``acme-e***ports``; a secret that does stand
    whole in a message (here: as a host name) is still replaced."""
    env = local_env(tmp_path, SHORT="x", WHOLE="zq7topsecret")
    base = (*S3, "--access-key-id", KEY_ID)
    short = run_measured(
        [*base, "--endpoint", "https://acme-exports.invalid", "--secret-env", "SHORT", "--json"], env=env
    )
    assert short.code == 5, short
    message = str(error_of(short)["message"])
    assert "Failed to resolve 'acme-exports.invalid'" in message and "***" not in message
    whole = run_measured([*base, "--endpoint", "https://zq7topsecret.invalid", "--secret-env", "WHOLE"], env=env)
    assert whole.code == 5, whole
    assert "zq7topsecret" not in whole.out + whole.err and "Failed to resolve '***.invalid'" in whole.err


@pytest.mark.slow
def test_errors_mask_the_access_key_id(tmp_path: Path, iam_moto: MotoServer) -> None:
    iam_moto.enforce_auth()
    env = local_env(tmp_path, SECRET="not-a-secret-anyone-knows", SEQEXPORT_ALLOW_LOCAL="1")
    unknown = "AKIANOSUCHKEY0000000"
    argv = ["create", "--account", "acme", "--bucket", "acme-exports", "--endpoint", iam_moto.endpoint,
            "--access-key-id", unknown, "--secret-env", "SECRET"]  # fmt: skip
    for as_json in ([], ["--json"]):
        result = run_measured([*argv, *as_json], env=env)
        assert result.code == 5, result
        assert unknown not in result.out + result.err
        assert "access key AKIA************0000 is not known" in result.out + result.err


# --- GCS and delete -------------------------------------------------------------------------------

GCS = ("create", "--account", "acme", "--provider", "gcs", "--bucket", "acme-exports", "--access-key-id",
       "GOOG1EXAMPLE", "--secret-env", "SECRET")  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "allow_local", "field", "said"),
    [
        (("--region", "europe-west1"), "", "region", "gcs has no region to choose"),
        (("--region", "us-east-1"), "1", "region", "gcs has no region to choose"),
        (("--endpoint", "https://minio.example.com"), "", "endpoint", "gcs always uses https://storage.googleapis.com"),
        (
            ("--endpoint", "https://minio.example.com"),
            "1",
            "endpoint",
            "gcs always uses https://storage.googleapis.com",
        ),
    ],
)
def test_gcs_refuses_the_fields_it_ignores(
    tmp_path: Path, extra: tuple[str, ...], allow_local: str, field: str, said: str
) -> None:
    env = local_env(tmp_path, SECRET="s3cr3t-value", SEQEXPORT_ALLOW_LOCAL=allow_local)
    result = run_measured([*GCS, *extra, "--json"], env=env, timeout=60)
    assert result.code == 2, result
    error = error_of(result)
    assert error["field"] == field and said in str(error["message"])
    assert not (tmp_path / "control.db").exists() or "acme-exports" not in run_measured(["list"], env=env).out


def test_delete_without_confirmation_names_the_field(tmp_path: Path) -> None:
    env = local_env(tmp_path, SEQEXPORT_ALLOW_LOCAL="1")
    created = run_measured(
        ["create", "--account", "acme", "--provider", "local", "--bucket", str(tmp_path / "out"), "--json"], env=env
    )
    assert created.code == 0, created
    export_id = json.loads(created.out)["id"]
    text = run_measured(["delete", export_id], env=env)
    assert text.code == 2 and text.err.startswith("error: confirmation: deleting export"), text
    as_json = run_measured(["delete", export_id, "--json"], env=env)
    assert error_of(as_json)["field"] == "confirmation"


# --- the helpers, case by case --------------------------------------------------------------------


def test_redact_secrets_matches_whole_tokens_only() -> None:
    from seqexport_dagster.destination.redaction import option_names_only, redact_secrets

    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert (
        redact_secrets("Failed to resolve 'acme-exports.s3' (x)", ["x"]) == "Failed to resolve 'acme-exports.s3' (***)"
    )
    assert redact_secrets(f"key={aws}, again {aws}.", [aws]) == "key=***, again ***."
    assert redact_secrets(f"https://{aws[:5]}.example/{aws[:5]}/x", [aws[:5]]) == "https://***.example/***/x"
    assert redact_secrets(f"{aws}X and X{aws}", [aws]) == f"{aws}X and X{aws}"  # part of a longer token
    assert redact_secrets('"a\\"b"', ['a"b']) == '"***"'  # its JSON-escaped form too
    assert redact_secrets("nothing", [None, ""]) == "nothing"
    assert option_names_only(["--secret-access-key=V", "V", "-x=1", "--ok"]) == ["--secret-access-key", "-x", "--ok"]


def test_escape_makes_every_invisible_character_visible() -> None:
    from seqexport_dagster.management.terminal import escape, escape_lines

    assert escape("\x1b[2J\rOK\x00\x7f\x9b\u202e\u2028\U000e0041 é ü 日本") == (
        "\\x1b[2J\\x0dOK\\x00\\x7f\\x9b\\u202e\\u2028\\U000e0041 é ü 日本"
    )
    assert escape("a\nb") == "a\\x0ab"
    assert escape_lines("ours\nalso ours\x1b[31m") == "ours\nalso ours\\x1b[31m"


def test_the_cli_prints_outside_text_inert(capsys: pytest.CaptureFixture[str]) -> None:
    """A value from a bucket, a store or the API cannot move the cursor or add a line to a table."""
    from seqexport_dagster.cli.render import Output, table

    out = Output(False)
    out.line(table(("EXPORT", "DESTINATION"), [("exp_1", "s3://b/\x1b[2J\rALL OK\nexp_2  s3://fake")]))
    out.progress("testing s3://b/\x1b]0;title\x07 ...")
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [
        "EXPORT  DESTINATION",
        "exp_1   s3://b/\\x1b[2J\\x0dALL OK\\x0aexp_2  s3://fake",
    ]
    assert printed.err == "testing s3://b/\\x1b]0;title\\x07 ...\n"
