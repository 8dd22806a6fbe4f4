"""The S3-family destination against a real moto server and against a recording server.

The recording server shows the exact bytes each provider profile puts on the wire (through TLS with
a pinned address, as in production); moto shows the objects land and that the customer's documented
least-privilege policy is enough.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.loaders import JSONFileLoader, Loader
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from seqexport_dagster.destination import s3_client
from seqexport_dagster.destination.base import PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.endpoint import ConnectRequest, socket_connector
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3 import S3Destination
from seqexport_dagster.errors import (
    AccessDenied,
    BadCredentials,
    ClockSkew,
    DestinationError,
    EndpointRefused,
    EndpointUnreachable,
    InvalidInput,
    NoSuchBucket,
    RetryableError,
)
from seqexport_dagster_tests.support.moto_server import MotoServer

LOCAL = OperatorPolicy(allow_local=True)
STRICT = OperatorPolicy()
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PUBLIC_IP = "93.184.215.14"
KEY = "sequenzy/email_events/date=2026-09-30/email_events-1790000000000-1790003600000-0000.jsonl.gz"


def gz_lines(n: int) -> bytes:
    return gzip.compress(b"".join(json.dumps({"id": f"e{i}", "n": i}).encode() + b"\n" for i in range(n)))


def md5_b64(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


# ---------------------------------------------------------------- recording server


@dataclass
class Captured:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    server_name: str | None


@dataclass
class Reply:
    status: int = 200
    code: str | None = None
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    extra_xml: str = ""
    reset: bool = False  # drop the connection instead of answering
    delay: float = 0.0


class Recorder:
    """A tiny S3 look-alike on 127.0.0.1 that records each request and answers from a script."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.requests: list[Captured] = []
        self.script: list[Reply] = []
        self.server_names: list[str | None] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server_name = getattr(self.connection, "seqexport_sni", None)
                recorder.requests.append(
                    Captured(
                        self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, server_name
                    )
                )
                reply = recorder.script.pop(0) if recorder.script else Reply()
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.reset:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                payload = b""
                if reply.code:
                    payload = (
                        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{reply.code}</Code>"
                        f"<Message>{reply.message}</Message>{reply.extra_xml}<RequestId>r1</RequestId></Error>"
                    ).encode()
                self.send_response(reply.status)
                headers = {"ETag": f'"{hashlib.md5(body).hexdigest()}"', **reply.headers}
                if payload:
                    headers["Content-Type"] = "application/xml"
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_PUT = do_GET = do_HEAD = do_DELETE = do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if ssl_context is not None:

            def remember_sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: ssl.SSLContext) -> None:
                sock.seqexport_sni = name  # type: ignore[union-attr]

            ssl_context.sni_callback = remember_sni
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.close()


@dataclass
class TLSFiles:
    ca: Path
    cert: Path
    key: Path


def make_tls(tmp: Path, names: Sequence[str]) -> TLSFiles:
    """A throwaway CA and a server certificate for ``names``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "seqexport test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TLSFiles(tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return files


@pytest.fixture(scope="module")
def tls_recorder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Recorder, TLSFiles]]:
    files = make_tls(
        tmp_path_factory.mktemp("tls"),
        [
            "*.s3.us-east-1.amazonaws.com",
            "storage.googleapis.com",
            "*.r2.cloudflarestorage.com",
            "s3.us-west-004.backblazeb2.com",
            "minio.example.com",
        ],
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.cert, files.key)
    rec = Recorder(context)
    yield rec, files
    rec.close()


class PublicDNS:
    """Resolves every name to one public address and records the lookups."""

    def __init__(self, answer: str = PUBLIC_IP) -> None:
        self.answer = answer
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append((host, port))
        return [self.answer]


class Redirect:
    """Stands in for the network: the pinned IP:443 is really our recorder on loopback."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.calls: list[ConnectRequest] = []

    def __call__(self, request: ConnectRequest) -> socket.socket:
        self.calls.append(request)
        return socket_connector(
            ConnectRequest("127.0.0.1", self.port, request.timeout, request.source_address, request.socket_options)
        )


def config(**overrides: Any) -> DestinationConfig:
    values: dict[str, Any] = {
        "provider": "s3",
        "bucket": "acme-exports",
        "prefix": "sequenzy",
        "region": "us-east-1",
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": SECRET,
    }
    values.update(overrides)
    return DestinationConfig(**values)


@pytest.fixture
def fresh_botocore_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide botocore session is built inside this test (under its environment), not
    reused from an earlier one."""
    monkeypatch.setattr(s3_client, "_session_caches", {})


PROFILES = {
    "aws": (config(), "acme-exports.s3.us-east-1.amazonaws.com", f"/{KEY}", "us-east-1"),
    "gcs": (config(provider="gcs", region=None), "storage.googleapis.com", f"/acme-exports/{KEY}", "auto"),
    "r2": (
        config(region=None, endpoint="https://0123abcd.r2.cloudflarestorage.com"),
        "0123abcd.r2.cloudflarestorage.com",
        f"/acme-exports/{KEY}",
        "auto",
    ),
    "b2": (
        config(region="us-west-004", endpoint="https://s3.us-west-004.backblazeb2.com"),
        "s3.us-west-004.backblazeb2.com",
        f"/acme-exports/{KEY}",
        "us-west-004",
    ),
    # A self-hosted MinIO on its own port: the Host header (which is signed) keeps the port.
    "minio": (
        config(endpoint="https://minio.example.com:9000"),
        "minio.example.com:9000",
        f"/acme-exports/{KEY}",
        "us-east-1",
    ),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_wire_format_per_profile(
    profile: str, tls_recorder: tuple[Recorder, TLSFiles], monkeypatch: pytest.MonkeyPatch, fresh_botocore_session: None
) -> None:
    rec, tls = tls_recorder
    rec.requests.clear()
    cfg, host, path, region = PROFILES[profile]
    name, _, port_text = host.partition(":")
    port = int(port_text or 443)
    dns, net = PublicDNS(), Redirect(rec.port)
    # Everything a worker's environment could throw at botocore; none of it may matter.
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    body = gz_lines(500)
    dest = S3Destination(cfg, STRICT, resolver=dns, connector=net, verify=str(tls.ca))
    try:
        dest.put(KEY, body)
    finally:
        dest.close()

    assert dns.lookups == [(name, port)]
    assert [(c.address, c.port) for c in net.calls] == [(PUBLIC_IP, port)]
    [request] = rec.requests
    assert request.server_name == name  # TLS SNI (and certificate check) used the name, not the IP
    assert (request.method, unquote(request.path)) == ("PUT", path)
    h = request.headers
    assert h["host"] == host
    assert request.body == body
    assert h["content-length"] == str(len(body))
    assert h["content-md5"] == md5_b64(body)
    assert h["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert f"/{region}/s3/aws4_request" in h["authorization"]
    assert h["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/")
    assert not [name for name in h if name.startswith(("x-amz-checksum", "x-amz-sdk-checksum"))]
    assert "x-amz-trailer" not in h and "x-amz-decoded-content-length" not in h
    assert "content-encoding" not in h and "transfer-encoding" not in h
    assert SECRET not in json.dumps(h)
    # Create-only: each provider's documented precondition, signed; none where there is none (B2).
    precondition = {k: v for k, v in h.items() if k in ("if-none-match", "x-goog-if-generation-match")}
    expected = {"gcs": {"x-goog-if-generation-match": "0"}, "b2": {}}.get(profile, {"if-none-match": "*"})
    assert precondition == expected
    signed = h["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert set(precondition) <= set(signed)


def test_tls_certificate_is_checked_against_the_hostname(
    tls_recorder: tuple[Recorder, TLSFiles],
) -> None:
    rec, tls = tls_recorder
    rec.requests.clear()
    dest = S3Destination(
        config(endpoint="https://s3.other-vendor.com"),
        STRICT,
        resolver=PublicDNS(),
        connector=Redirect(rec.port),
        verify=str(tls.ca),
        max_attempts=1,
    )
    with pytest.raises(DestinationError, match="TLS"):
        dest.put(KEY, b"x")
    assert rec.requests == []


def test_strict_policy_refuses_loopback_resolution_without_connecting() -> None:
    dns, net = PublicDNS("127.0.0.1"), Redirect(1)
    dest = S3Destination(config(endpoint="https://s3.rebind.example"), STRICT, resolver=dns, connector=net)
    with pytest.raises(EndpointRefused, match=r"resolves to a non-public address"):
        dest.put(KEY, b"x")
    assert net.calls == []
    assert len(dns.lookups) == 1  # a refusal is final: not retried


def test_virtual_hosted_aws_names_are_pinned_too(caplog: pytest.LogCaptureFixture) -> None:
    dns, net = PublicDNS("169.254.169.254"), Redirect(1)
    dest = S3Destination(config(), STRICT, resolver=dns, connector=net)
    with pytest.raises(EndpointRefused, match="non-public address") as refused:
        dest.put(KEY, b"x")
    assert "169.254" not in str(refused.value) and "(cloud metadata service)" in caplog.text
    assert dns.lookups == [("acme-exports.s3.us-east-1.amazonaws.com", 443)]
    assert net.calls == []


def test_strict_policy_refuses_plain_http_endpoint() -> None:
    with pytest.raises(InvalidInput, match="only https"):
        S3Destination(config(endpoint="http://s3.example.com"), STRICT)


# ---------------------------------------------------------------- error translation (recording server)


def local_dest(rec: Recorder, **kwargs: Any) -> S3Destination:
    return S3Destination(config(endpoint=rec.endpoint), LOCAL, **kwargs)


@pytest.mark.parametrize(
    ("reply", "error", "text"),
    [
        (
            Reply(403, "AccessDenied", "Access Denied"),
            AccessDenied,
            f"access denied for s3:PutObject on acme-exports/{KEY}",
        ),
        (
            Reply(404, "NoSuchBucket", "The specified bucket does not exist"),
            NoSuchBucket,
            "acme-exports does not exist",
        ),
        (Reply(403, "InvalidAccessKeyId", "nope"), BadCredentials, "access key *********** is not known"),
        (
            Reply(403, "SignatureDoesNotMatch", "The request signature we calculated does not match"),
            BadCredentials,
            "bad signature: the secret does not match the access key",
        ),
        (Reply(403, "RequestTimeTooSkewed", "too skewed"), ClockSkew, "clock"),
        (
            Reply(301, "PermanentRedirect", "use the other endpoint", {"x-amz-bucket-region": "eu-west-1"}),
            DestinationError,
            "bucket acme-exports is in region eu-west-1, not us-east-1",
        ),
        (
            Reply(400, "AuthorizationHeaderMalformed", "wrong region", extra_xml="<Region>eu-west-2</Region>"),
            DestinationError,
            "is in region eu-west-2",
        ),
        (
            Reply(400, "InvalidStorageClass", "odd store says no"),
            DestinationError,
            "InvalidStorageClass: odd store says no",
        ),
        (Reply(400, "Weird", f"you sent {SECRET}"), DestinationError, "you sent ***"),
    ],
)
def test_permanent_errors_are_translated_and_not_retried(
    recorder: Recorder, reply: Reply, error: type[Exception], text: str
) -> None:
    recorder.script = [reply, Reply(), Reply()]
    dest = local_dest(recorder)
    with pytest.raises(error) as info:
        dest.put(KEY, b"body")
    assert type(info.value) is error
    assert text in str(info.value)
    assert SECRET not in str(info.value)
    assert not info.value.retryable  # type: ignore[attr-defined]
    # One request: not retried, no region redirect, no HeadBucket to look the region up.
    assert [(r.method, unquote(r.path)) for r in recorder.requests] == [("PUT", f"/acme-exports/{KEY}")]


def test_precondition_failed_means_the_object_was_already_there(recorder: Recorder) -> None:
    recorder.script = [Reply(412, "PreconditionFailed", "At least one of the pre-conditions did not hold")]
    dest = local_dest(recorder)
    assert dest.put(KEY, b"body") == PutOutcome.EXISTED
    assert len(recorder.requests) == 1 and recorder.requests[0].headers["if-none-match"] == "*"


def test_a_store_without_preconditions_gets_plain_puts_after_its_501(recorder: Recorder) -> None:
    recorder.script = [Reply(501, "NotImplemented", "A header you provided implies functionality not implemented")]
    dest = local_dest(recorder)
    assert dest.put(KEY, b"body") == PutOutcome.CREATED
    assert not dest.preconditions
    dest.put(KEY + "x", b"body")
    assert ["if-none-match" in r.headers for r in recorder.requests] == [True, False, False]


def test_replace_sends_no_precondition(recorder: Recorder) -> None:
    dest = local_dest(recorder)
    assert dest.put(KEY, b"body", create_only=False) == PutOutcome.CREATED
    assert "if-none-match" not in recorder.requests[0].headers


def test_access_denied_after_a_lost_answer_says_the_outcome_is_unknown(recorder: Recorder) -> None:
    recorder.script = [Reply(reset=True), Reply(403, "AccessDenied", "Access Denied")]
    with pytest.raises(AccessDenied) as info:
        local_dest(recorder, max_attempts=3).put(KEY, b"body")
    assert info.value.outcome_unknown, "botocore re-sent it: the first send may have created the object"
    recorder.script = [Reply(403, "AccessDenied", "Access Denied")]
    with pytest.raises(AccessDenied) as again:
        local_dest(recorder).put(KEY, b"body")
    assert not again.value.outcome_unknown


def test_create_only_on_moto_never_replaces(moto: MotoServer) -> None:
    admin = moto.admin_client()
    admin.create_bucket(Bucket="create-only")
    dest = S3Destination(config(bucket="create-only", endpoint=moto.endpoint), LOCAL)
    try:
        assert dest.put(KEY, b"first") == PutOutcome.CREATED
        assert dest.put(KEY, b"second") == PutOutcome.EXISTED
        assert admin.get_object(Bucket="create-only", Key=KEY)["Body"].read() == b"first"
        assert dest.put(KEY, b"third", create_only=False) == PutOutcome.CREATED
        assert admin.get_object(Bucket="create-only", Key=KEY)["Body"].read() == b"third"
    finally:
        dest.close()


def test_access_denied_names_bucket_and_prefix(recorder: Recorder) -> None:
    recorder.script = [Reply(403, "AccessDenied", "Access Denied")]
    with pytest.raises(AccessDenied) as info:
        local_dest(recorder).put(KEY, b"body")
    assert "s3:PutObject on acme-exports/sequenzy/*" in str(info.value)


@pytest.mark.parametrize(
    "reply",
    [Reply(503, "SlowDown", "Please reduce your request rate."), Reply(500, "InternalError", "oops"), Reply(503)],
)
def test_transient_errors_are_retried_then_reported_retryable(recorder: Recorder, reply: Reply) -> None:
    recorder.script = [reply, reply, reply]
    with pytest.raises(RetryableError) as info:
        local_dest(recorder, max_attempts=3).put(KEY, b"body")
    assert info.value.retryable
    assert len(recorder.requests) == 3


def test_transient_error_then_success(recorder: Recorder) -> None:
    recorder.script = [Reply(503, "SlowDown", "slow down"), Reply()]
    local_dest(recorder).put(KEY, b"body")
    assert [r.body for r in recorder.requests] == [b"body", b"body"]
    assert all(r.headers["content-md5"] == md5_b64(b"body") for r in recorder.requests)


def test_connection_reset_is_retryable(recorder: Recorder) -> None:
    recorder.script = [Reply(reset=True), Reply(reset=True)]
    with pytest.raises(RetryableError):
        local_dest(recorder, max_attempts=2).put(KEY, b"body")
    assert len(recorder.requests) == 2


def test_read_timeout_is_retryable(recorder: Recorder) -> None:
    recorder.script = [Reply(delay=1.5)]
    with pytest.raises(RetryableError):
        local_dest(recorder, max_attempts=1, read_timeout=0.3).put(KEY, b"body")


def test_refused_connection_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        dest = S3Destination(config(endpoint=f"http://127.0.0.1:{port}"), LOCAL, max_attempts=1)
        with pytest.raises(EndpointUnreachable, match=f"cannot reach http://127.0.0.1:{port}"):
            dest.put(KEY, b"body")


def test_dns_failure_is_unreachable() -> None:
    def no_such_name(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    dest = S3Destination(
        config(endpoint="https://s3.does-not-exist.example"), STRICT, resolver=no_such_name, max_attempts=1
    )
    with pytest.raises(EndpointUnreachable, match="cannot reach https://s3.does-not-exist.example"):
        dest.put(KEY, b"body")


def test_only_put_object_ever_reaches_the_wire(recorder: Recorder) -> None:
    dest = local_dest(recorder)
    client: Any = dest._client  # what botocore could be asked to do by any future code
    calls: list[Callable[[], object]] = [
        lambda: client.list_objects_v2(Bucket="acme-exports"),
        lambda: client.get_object(Bucket="acme-exports", Key=KEY),
        lambda: client.head_bucket(Bucket="acme-exports"),
        lambda: client.delete_object(Bucket="acme-exports", Key=KEY),
    ]
    for call in calls:
        with pytest.raises(DestinationError, match="only ever uses PutObject"):
            call()
    assert recorder.requests == []


def test_key_outside_prefix_is_refused(recorder: Recorder) -> None:
    with pytest.raises(InvalidInput, match="not below the export prefix"):
        local_dest(recorder).put("elsewhere/x.jsonl.gz", b"x")
    with pytest.raises(InvalidInput):
        local_dest(recorder).put("sequenzyX/x.jsonl.gz", b"x")
    assert recorder.requests == []


@pytest.mark.parametrize("missing", ["access_key_id", "secret_access_key"])
@pytest.mark.parametrize("value", [None, ""])
def test_explicit_credentials_are_required(missing: str, value: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Even with credentials in the environment: they belong to the worker, never to an export.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWORKER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
    with pytest.raises(InvalidInput) as info:
        S3Destination(config(**{missing: value}), STRICT)
    assert info.value.field == missing


def test_describe_never_shows_the_secret(recorder: Recorder) -> None:
    assert S3Destination(config(), STRICT).describe() == "s3://acme-exports/sequenzy"
    assert SECRET not in local_dest(recorder).describe()
    assert SECRET not in repr(config())


# ---------------------------------------------------------------- real moto server


def test_round_trip_through_moto(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_botocore_session: None
) -> None:
    admin = moto.admin_client()
    admin.create_bucket(Bucket="round-trip")
    # A worker environment that would break or redirect a default boto3 client.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    aws_config = tmp_path / "config"
    aws_config.write_text("[default]\ns3 =\n  addressing_style = virtual\nendpoint_url = http://127.0.0.1:9\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws_config))
    monkeypatch.setenv("HOME", str(tmp_path))
    # A stray ~/.aws/models S3 model without PutObject (botocore reads that folder before its own).
    models = tmp_path / ".aws" / "models"
    (models / "s3" / "2006-03-01").mkdir(parents=True)
    stray = {
        "version": "2.0",
        "metadata": {
            "apiVersion": "2006-03-01",
            "endpointPrefix": "s3",
            "protocol": "rest-xml",
            "serviceId": "S3",
            "signatureVersion": "s3v4",
            "uid": "s3-2006-03-01",
        },
        "operations": {},
        "shapes": {},
    }
    (models / "s3" / "2006-03-01" / "service-2.json").write_text(json.dumps(stray))
    monkeypatch.setattr(Loader, "CUSTOMER_DATA_PATH", str(models))

    dest = open_destination(config(bucket="round-trip", endpoint=moto.endpoint, access_key_id="AKIAROUNDTRIP"), LOCAL)
    assert isinstance(dest, S3Destination)
    bodies = {
        KEY: gz_lines(1000),
        KEY.replace("-0000", "-0001"): gz_lines(0),
        "sequenzy/subscribers/date=2026-09-30/_SUCCESS": b"",
        "sequenzy/_sequenzy/connection-test-abc.txt": b"seqexport connection test\n",
    }
    try:
        for key, body in bodies.items():
            dest.put(key, body)
        dest.put(KEY, bodies[KEY])  # a retry rewrites the same name
    finally:
        dest.close()

    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.delenv("ALL_PROXY")
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name)
    listed = admin.list_objects_v2(Bucket="round-trip")["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(bodies)
    for key, body in bodies.items():
        obj = admin.get_object(Bucket="round-trip", Key=key)
        assert obj["Body"].read() == body
        assert obj["ETag"].strip('"') == hashlib.md5(body).hexdigest()
    assert gzip.decompress(bodies[KEY]).count(b"\n") == 1000


def test_later_destinations_load_no_model(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first destination in a process loads botocore's S3 model, endpoint rules and partitions
    # (0.15-0.5 s); later ones, as the runner opens one per window, must reuse them.
    local_dest(recorder).close()
    loaded: list[str] = []
    load_file = JSONFileLoader.load_file

    def counting(loader: JSONFileLoader, file_path: str) -> Any:
        loaded.append(file_path)
        return load_file(loader, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    dest = S3Destination(config(endpoint=recorder.endpoint, access_key_id="AKIASECOND"), LOCAL)
    dest.put(KEY, b"x")
    dest.close()
    assert loaded == []
    assert recorder.requests[-1].headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIASECOND/")


def test_destinations_sharing_a_session_stay_apart(recorder: Recorder) -> None:
    # Destinations share one botocore session: each must still sign with its own key and send
    # through its own guarded pools (its own before-send handler), also when built concurrently.
    other = Recorder()
    try:
        made: dict[int, S3Destination] = {}
        errors: list[BaseException] = []

        def build(n: int) -> None:
            try:
                rec = recorder if n % 2 else other
                made[n] = S3Destination(
                    config(endpoint=rec.endpoint, access_key_id=f"AKIA{n:04d}", secret_access_key=f"secret-{n}"),
                    LOCAL,
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=build, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        made[0].close()  # closing one leaves the others working
        for n in range(1, 8):
            made[n].put(f"sequenzy/k{n}.jsonl.gz", b"x")
        for dest in made.values():
            dest.close()
        for rec, parity in ((recorder, 1), (other, 0)):
            seen = {
                r.path.rsplit("/", 1)[-1]: r.headers["authorization"].split("Credential=")[1].split("/")[0]
                for r in rec.requests
            }
            expected = {f"k{n}.jsonl.gz": f"AKIA{n:04d}" for n in range(1, 8) if n % 2 == parity}
            assert seen == expected
    finally:
        other.close()


def test_no_such_bucket_on_moto(moto: MotoServer) -> None:
    dest = S3Destination(config(bucket="never-created", endpoint=moto.endpoint), LOCAL)
    with pytest.raises(NoSuchBucket, match="never-created does not exist"):
        dest.put(KEY, b"x")


# ---------------------------------------------------------------- least privilege (moto enforcing IAM)


def put_only_policy(bucket: str, prefix: str) -> str:
    """Exactly the policy the customer documentation asks for."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"}
            ],
        }
    )


def make_user(iam: Any, name: str, policy: str) -> tuple[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=policy)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def user_client(moto: MotoServer, key_id: str, secret: str) -> Any:
    return boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret).client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, proxies={}, retries={"total_max_attempts": 1}),
    )


def error_code(call: Callable[[], object]) -> str:
    with pytest.raises(ClientError) as info:
        call()
    return str(info.value.response["Error"]["Code"])


def test_documented_put_only_policy_is_enough(iam_moto: MotoServer) -> None:
    iam = iam_moto.admin_client("iam")
    iam_moto.admin_client().create_bucket(Bucket="acme-exports")
    exporter = make_user(iam, "exporter", put_only_policy("acme-exports", "sequenzy"))
    elsewhere = make_user(iam, "elsewhere", put_only_policy("acme-exports", "other-team"))
    reader = make_user(
        iam,
        "reader",
        json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}),
    )
    iam_moto.enforce_auth()

    body = gz_lines(200)
    dest = S3Destination(
        config(endpoint=iam_moto.endpoint, access_key_id=exporter[0], secret_access_key=exporter[1]), LOCAL
    )
    dest.put(KEY, body)
    dest.put("sequenzy/subscribers/date=2026-09-30/_SUCCESS", b"")
    # The create-only precondition needs no right beyond s3:PutObject.
    assert dest.put(KEY, b"again") == PutOutcome.EXISTED
    dest.close()

    got = user_client(iam_moto, *reader).get_object(Bucket="acme-exports", Key=KEY)["Body"].read()
    assert got == body

    # The exporter's key can do nothing else, so nothing else can ever be needed.
    as_exporter = user_client(iam_moto, *exporter)
    assert error_code(lambda: as_exporter.list_objects_v2(Bucket="acme-exports")) == "AccessDenied"
    assert error_code(lambda: as_exporter.get_object(Bucket="acme-exports", Key=KEY)) == "AccessDenied"
    assert error_code(lambda: as_exporter.delete_object(Bucket="acme-exports", Key=KEY)) == "AccessDenied"
    assert error_code(lambda: as_exporter.put_object(Bucket="acme-exports", Key="outside/x", Body=b"x")) == (
        "AccessDenied"
    )

    wrong_prefix = S3Destination(
        config(endpoint=iam_moto.endpoint, access_key_id=elsewhere[0], secret_access_key=elsewhere[1]), LOCAL
    )
    with pytest.raises(AccessDenied) as info:
        wrong_prefix.put(KEY, body)
    message = str(info.value)
    assert f"access denied for s3:PutObject on acme-exports/{KEY}" in message
    assert "s3:PutObject on acme-exports/sequenzy/*" in message
    assert elsewhere[1] not in message

    bad_secret = S3Destination(
        config(endpoint=iam_moto.endpoint, access_key_id=exporter[0], secret_access_key="not-the-secret"), LOCAL
    )
    with pytest.raises(BadCredentials, match="bad signature: the secret does not match the access key"):
        bad_secret.put(KEY, body)

    unknown = S3Destination(
        config(endpoint=iam_moto.endpoint, access_key_id="AKIANOSUCHKEY0000000", secret_access_key="x"), LOCAL
    )
    with pytest.raises(BadCredentials, match=r"AKIA\*{12}0000 is not known") as unknown_info:
        unknown.put(KEY, body)
    assert "AKIANOSUCHKEY0000000" not in str(unknown_info.value)  # masked, as docs/cli.md promises
