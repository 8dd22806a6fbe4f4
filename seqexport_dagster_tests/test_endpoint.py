"""Endpoint checks at save time and at connect time (DNS rebinding, embedded IPv4, metadata)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

import pytest

from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.endpoint import (
    ConnectGuard,
    ConnectRequest,
    is_public_address,
    non_public_reason,
    socket_connector,
    validate_endpoint,
)
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import EndpointRefused, InvalidInput

STRICT = OperatorPolicy()
LOCAL = OperatorPolicy(allow_local=True)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("https://s3.example.com", "https://s3.example.com"),
        ("https://S3.Example.COM/", "https://s3.example.com"),
        ("https://s3.example.com:443", "https://s3.example.com"),
        ("https://abc123.r2.cloudflarestorage.com", "https://abc123.r2.cloudflarestorage.com"),
        ("https://s3.us-west-004.backblazeb2.com:9000", "https://s3.us-west-004.backblazeb2.com:9000"),
        ("  https://minio.acme.io  ", "https://minio.acme.io"),
    ],
)
def test_accepted_endpoints_are_normalized(endpoint: str, expected: str) -> None:
    assert validate_endpoint(endpoint, STRICT) == expected


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://s3.example.com", "only https:// is accepted"),
        ("ftp://s3.example.com", "only https:// is accepted"),
        ("s3.example.com", "only https:// is accepted"),
        ("//s3.example.com", "only https:// is accepted"),
        ("https://user:pass@s3.example.com", "user name or password"),
        ("https://user@s3.example.com", "user name or password"),
        ("https://s3.example.com@127.0.0.1", "user name or password"),
        ("https://s3.example.com/bucket", "has a path"),
        ("https://s3.example.com//", "has a path"),
        ("https://s3.example.com/?", "query string"),
        ("https://s3.example.com?x=1", "query string"),
        ("https://s3.example.com#frag", "fragment"),
        ("https://s3.example.com:0", "ports are 1-65535"),
        ("https://s3.example.com:99999", "not a valid URL"),
        ("https://s3.example.com:abc", "not a valid URL"),
        ("https://127.0.0.1", "IP address literal"),
        ("https://2130706433", "IP address literal"),
        ("https://0177.0.0.1", "IP address literal"),
        ("https://0x7f000001", "IP address literal"),
        ("https://0x7f.0.0.1", "IP address literal"),
        ("https://127.1", "IP address literal"),
        ("https://169.254.169.254", "IP address literal"),
        ("https://8.8.8.8", "IP address literal"),
        ("https://s3.example.123", "IP address literal"),
        ("https://[::1]", "IPv6 address literal"),
        ("https://[::ffff:127.0.0.1]", "IPv6 address literal"),
        ("https://[::ffff:7f00:1]:443", "IPv6 address literal"),
        ("https://[2606:4700::1]", "IPv6 address literal"),
        ("https://localhost", "local or internal name"),
        ("https://LOCALHOST:9000", "local or internal name"),
        ("https://foo.localhost", "local or internal name"),
        ("https://minio.local", "local or internal name"),
        ("https://s3.corp.internal", "local or internal name"),
        ("https://metadata.google.internal", "local or internal name"),
        ("https://instance-data.ec2.internal", "local or internal name"),
        ("https://router.home.arpa", "local or internal name"),
        ("https://minio", "fully qualified"),
        ("https://s3.example.com.", "without it"),
        ("https://s3_bucket.example.com", "not a valid DNS name"),
        ("https://-s3.example.com", "not a valid DNS name"),
        ("https://s3..example.com", "not a valid DNS name"),
        ("https://" + "a" * 64 + ".example.com", "not a valid DNS name"),
        ("https://bücher.example.com", "punycode"),
        ("https://s3.example.com\r\nHost: evil", "control characters"),
        ("https://s3 .example.com", "spaces"),
        ("", "empty"),
    ],
)
def test_refused_endpoints_name_the_reason(endpoint: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_endpoint(endpoint, STRICT)
    assert info.value.field == "endpoint"
    assert reason in info.value.problem


def test_userinfo_is_not_echoed_back() -> None:
    with pytest.raises(InvalidInput) as info:
        validate_endpoint("https://AKIA:supersecret@s3.example.com", STRICT)
    assert "supersecret" not in str(info.value)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("http://localhost:9000/", "http://localhost:9000"),
        ("https://minio:9000", "https://minio:9000"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://10.0.0.5", "http://10.0.0.5"),
    ],
)
def test_operator_policy_allows_local_endpoints(endpoint: str, expected: str) -> None:
    assert validate_endpoint(endpoint, LOCAL) == expected


@pytest.mark.parametrize(
    "endpoint",
    ["http://user:pw@127.0.0.1:5000", "http://127.0.0.1:5000/path", "http://127.1:5000", "gopher://127.0.0.1"],
)
def test_operator_policy_still_refuses_malformed_endpoints(endpoint: str) -> None:
    with pytest.raises(InvalidInput):
        validate_endpoint(endpoint, LOCAL)


def test_validate_config_uses_endpoint_checks() -> None:
    config = DestinationConfig(
        "s3", "acme-exports", "sequenzy", endpoint="https://0x7f000001", access_key_id="k", secret_access_key="s"
    )
    with pytest.raises(InvalidInput, match="IP address literal"):
        validate_config(config, STRICT)


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "169.254.1.1",
        "100.64.0.1",
        "100.127.255.254",
        "100.100.100.200",
        "192.0.0.192",
        "192.0.0.8",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "192.0.2.1",
        "::1",
        "::",
        "fe80::1",
        "fe80::1%eth0",
        "fc00::1",
        "fd00:ec2::254",
        "ff02::1",
        "2001:db8::1",
        # IPv4 embedded in IPv6 is refused whatever the embedded address, public ones included.
        "::ffff:127.0.0.1",
        "::ffff:8.8.8.8",
        "::127.0.0.1",
        "64:ff9b::7f00:1",
        "64:ff9b::808:808",
        "64:ff9b:1::a9fe:a9fe",
        "2002:7f00:1::1",
        "2002:808:808::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "not-an-ip",
    ],
)
def test_non_public_addresses(ip: str) -> None:
    assert not is_public_address(ip)
    assert non_public_reason(ip)


@pytest.mark.parametrize(
    "ip", ["8.8.8.8", "1.1.1.1", "52.216.0.1", "142.250.74.110", "2606:4700::6810:84e5", "2a00:1450:4001::200e"]
)
def test_public_addresses(ip: str) -> None:
    assert is_public_address(ip)


@pytest.mark.parametrize(
    ("ip", "reason"),
    [
        ("100.64.0.1", "carrier-grade NAT"),
        ("64:ff9b::a9fe:a9fe", "NAT64"),
        ("2002:a9fe:a9fe::1", "6to4"),
        ("2001::1", "Teredo"),
        ("::ffff:169.254.169.254", "IPv4-mapped"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
    ],
)
def test_reasons_are_specific(ip: str, reason: str) -> None:
    assert reason in (non_public_reason(ip) or "")


class FakeDNS:
    """Answers from a script, one list per lookup, like a rebinding attacker's name server."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append((host, port))
        return self.answers.pop(0)


class FakeConnect:
    """Records every connection attempt instead of making it."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[ConnectRequest] = []
        self.fail = fail or set()

    def __call__(self, request: ConnectRequest) -> socket.socket:
        self.calls.append(request)
        if request.address in self.fail:
            raise ConnectionRefusedError(f"refused by {request.address}")
        a, b = socket.socketpair()
        b.close()
        return a


def test_connect_pins_the_checked_address() -> None:
    dns, connect = FakeDNS(["93.184.215.14"]), FakeConnect()
    guard = ConnectGuard(STRICT, dns, connect)
    guard.connect("s3.example.com", 443, 5.0).close()
    assert dns.lookups == [("s3.example.com", 443)]
    assert [(c.address, c.port, c.timeout) for c in connect.calls] == [("93.184.215.14", 443, 5.0)]


def test_dns_rebinding_is_refused_before_any_connection() -> None:
    # First lookup public, the next one loopback: each connection resolves once and connects to what
    # it checked, so the second connection is refused and never opened.
    dns, connect = FakeDNS(["93.184.215.14"], ["127.0.0.1"]), FakeConnect()
    guard = ConnectGuard(STRICT, dns, connect)
    guard.connect("rebind.example.com", 443, 5.0).close()
    with pytest.raises(EndpointRefused, match=r"rebind\.example\.com resolves to a non-public address"):
        guard.connect("rebind.example.com", 443, 5.0)
    assert [c.address for c in connect.calls] == ["93.184.215.14"]
    assert len(dns.lookups) == 2


@pytest.mark.parametrize(
    "answers",
    [
        ["93.184.215.14", "127.0.0.1"],
        ["93.184.215.14", "10.0.0.7"],
        ["2606:4700::1", "169.254.169.254"],
        ["93.184.215.14", "fd00:ec2::254"],
        ["100.64.1.1"],
        ["100.100.100.200"],
        ["64:ff9b::5db8:d70e"],  # NAT64 of a public address: still refused
        ["2002:5db8:d70e::1"],
        ["2001:0:5db8:d70e::1"],
        ["::ffff:93.184.215.14"],
    ],
)
def test_any_non_public_answer_refuses_without_connecting(answers: list[str]) -> None:
    dns, connect = FakeDNS(answers), FakeConnect()
    with pytest.raises(EndpointRefused, match="must resolve only to public addresses"):
        ConnectGuard(STRICT, dns, connect).connect("mixed.example.com", 443, 5.0)
    assert connect.calls == []


def test_connect_tries_the_next_checked_address() -> None:
    dns, connect = FakeDNS(["93.184.215.14", "2606:4700::1"]), FakeConnect(fail={"93.184.215.14"})
    ConnectGuard(STRICT, dns, connect).connect("s3.example.com", 443, 5.0).close()
    assert [c.address for c in connect.calls] == ["93.184.215.14", "2606:4700::1"]


def test_connect_raises_the_last_os_error_when_nothing_answers() -> None:
    dns, connect = FakeDNS(["93.184.215.14"]), FakeConnect(fail={"93.184.215.14"})
    with pytest.raises(ConnectionRefusedError):
        ConnectGuard(STRICT, dns, connect).connect("s3.example.com", 443, 5.0)


def test_empty_answer_is_a_resolution_failure() -> None:
    with pytest.raises(socket.gaierror):
        ConnectGuard(STRICT, FakeDNS([]), FakeConnect()).connect("void.example.com", 443, 5.0)


def test_allow_local_skips_address_checks() -> None:
    dns, connect = FakeDNS(["127.0.0.1"]), FakeConnect()
    ConnectGuard(LOCAL, dns, connect).connect("localhost", 9000, 1.0).close()
    assert [c.address for c in connect.calls] == ["127.0.0.1"]


def test_socket_connector_connects_to_an_ip_without_lookups() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        accepted: list[socket.socket] = []
        thread = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
        thread.start()
        sock = socket_connector(
            ConnectRequest("127.0.0.1", port, 5.0, None, ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),))
        )
        thread.join(5)
        try:
            assert sock.getpeername() == ("127.0.0.1", port)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        finally:
            sock.close()
            for s in accepted:
                s.close()
    with pytest.raises(socket.gaierror):
        socket_connector(ConnectRequest("localhost", 1, 1.0))  # a name is refused: numeric hosts only
