"""Endpoint safety: what a customer may point us at, and where we actually connect.

Two checks, because one is not enough:

* `validate_endpoint` runs at save time on the text the customer typed. It refuses anything that is
  not a plain ``https://dns-name[:port]`` with a port the operator allows (443 and 9000 by default), so IP literals in odd notations (``2130706433``,
  ``0177.0.0.1``, ``0x7f000001``, ``127.1``, ``[::ffff:127.0.0.1]``) and internal names never get
  stored.
* `ConnectGuard` runs at connect time. A valid public-looking name can still resolve to
  ``127.0.0.1`` or the metadata service (or start doing so later: DNS rebinding). The guard resolves
  once, refuses if *any* answer is non-public, and then opens the socket to a checked address, never
  to the name again. `seqexport_dagster.destination.s3` plugs it into urllib3 below botocore, so it
  also covers whichever host botocore builds (virtual-hosted ``<bucket>.<endpoint>`` names
  included). TLS still verifies the certificate against the hostname: only the socket is pinned.

This module imports neither botocore nor urllib3, so validating a config stays cheap.

With ``OperatorPolicy.allow_local`` (tests and the demo, never customer input) plain http, loopback
and private addresses are accepted.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import EndpointRefused, InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The operator's log: the only place a refused name's resolved address is written.
log = logging.getLogger("seqexport.destination")

#: ``(host, port) -> IP address strings``. Injectable so tests can play a rebinding DNS server.
Resolver = Callable[[str, int], Sequence[str]]

#: Opens a TCP connection to one *IP address*. Never receives a hostname.
Connector = Callable[["ConnectRequest"], socket.socket]

_ACCEPTED: Final = "use https://host or https://host:port with a public DNS name, for example https://<account-id>.r2.cloudflarestorage.com"

_BLOCKED_NAMES: Final = frozenset({"localhost", "metadata.google.internal", "metadata", "instance-data"})
_BLOCKED_SUFFIXES: Final = (".localhost", ".local", ".localdomain", ".internal", ".home.arpa", ".arpa")
_LABEL_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# WHATWG URL parsers (and inet_aton) read a host whose last label is numeric as an IPv4 address.
_NUMERIC_LABEL_RE: Final = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")

_METADATA: Final = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
# Networks Python's `is_global` has treated differently across patch releases, listed explicitly.
_V4_BLOCKED: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)
# IPv6 forms that carry an IPv4 address. Whatever the embedded address, a gateway would forward us
# to it, so they are refused outright rather than judged.
_V6_EMBEDDING: Final = (
    (ipaddress.ip_network("::ffff:0:0/96"), "IPv4-mapped IPv6"),
    (ipaddress.ip_network("::/96"), "IPv4-compatible IPv6"),
    (ipaddress.ip_network("64:ff9b::/96"), "NAT64"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "local-use NAT64"),
    (ipaddress.ip_network("2002::/16"), "6to4"),
    (ipaddress.ip_network("2001::/32"), "Teredo"),
)
_V6_BLOCKED: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "::/128",
        "::1/128",
        "100::/64",
        "2001:db8::/32",
        "2001:10::/28",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)


def non_public_reason(ip: str | IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address we may connect to, or ``None`` if it is."""
    try:
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    except ValueError:
        return "not an IP address"
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    if address in _METADATA:
        return "cloud metadata service"
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified address"
    if isinstance(address, ipaddress.IPv6Address):
        for network, name in _V6_EMBEDDING:
            if address in network:
                return f"{name} address (embeds an IPv4 address)"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10"):
        return "carrier-grade NAT (100.64.0.0/10)"
    if address.is_private:
        return "private network"
    if address.is_reserved:
        return "reserved range"
    blocked = _V4_BLOCKED if isinstance(address, ipaddress.IPv4Address) else _V6_BLOCKED
    if any(address in network for network in blocked) or not address.is_global:
        return "not globally routable"
    return None


def is_public_address(ip: str | IPAddress) -> bool:
    """True only for a globally routable unicast address that is not a metadata service."""
    return non_public_reason(ip) is None


def _looks_like_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host)  # accepts 2130706433, 0177.0.0.1, 0x7f000001, 127.1
    except OSError:
        return bool(_NUMERIC_LABEL_RE.match(host.rsplit(".", 1)[-1]))
    return True


def _is_local_name(host: str) -> bool:
    return host in _BLOCKED_NAMES or host.endswith(_BLOCKED_SUFFIXES) or "." not in host


def _check_dns_name(host: str, policy: OperatorPolicy) -> None:
    if not host.isascii():
        raise InvalidInput("endpoint", f"{host!r} is not an ASCII host name; use its punycode (xn--) form")
    if host.endswith("."):
        raise InvalidInput("endpoint", f"{host!r} ends with a dot; write the name without it")
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL_RE.match(label) for label in labels):
        raise InvalidInput(
            "endpoint",
            f"{host!r} is not a valid DNS name: labels of 1-63 letters, digits and '-', not starting or "
            "ending with '-'",
        )
    if policy.allow_local:
        return
    if host in _BLOCKED_NAMES or host.endswith(_BLOCKED_SUFFIXES):
        raise InvalidInput("endpoint", f"{host!r} is a local or internal name; {_ACCEPTED}")
    if len(labels) < 2:
        # A single label is completed by the worker's DNS search domains: an internal name.
        raise InvalidInput("endpoint", f"{host!r} is not a fully qualified domain name; {_ACCEPTED}")


def validate_endpoint(endpoint: str, policy: OperatorPolicy) -> str:
    """Check a customer-given endpoint URL; return it normalized as ``https://host[:port]``.

    Raises `InvalidInput` naming what is wrong and what is accepted. Nothing is resolved here; the
    address checks happen at connect time (`ConnectGuard`), where the answer is the one we use.
    """
    text = endpoint.strip()
    if not text or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise InvalidInput("endpoint", f"{endpoint!r} is empty or contains spaces or control characters; {_ACCEPTED}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput("endpoint", f"{endpoint!r} is not a valid URL ({exc}); {_ACCEPTED}") from None
    scheme = parts.scheme.lower()
    allowed_schemes = ("https", "http") if policy.allow_local else ("https",)
    if scheme not in allowed_schemes:
        shown = f"{scheme}://" if scheme else "no scheme"
        local = (
            " (a local test store over http:// needs SEQEXPORT_ALLOW_LOCAL=1, operators and tests only)"
            if scheme == "http"
            else ""
        )
        raise InvalidInput("endpoint", f"{endpoint!r} uses {shown}; only https:// is accepted{local}")
    if "@" in parts.netloc:
        raise InvalidInput(
            "endpoint",
            f"{_redact_userinfo(text)!r} contains a user name or password; put credentials in the key fields, not the URL",
        )
    if parts.path not in ("", "/"):
        raise InvalidInput(
            "endpoint",
            f"{endpoint!r} has a path ({parts.path!r}); give the endpoint only, and the folder as the prefix",
        )
    if "?" in text or parts.query:
        raise InvalidInput("endpoint", f"{endpoint!r} has a query string; {_ACCEPTED}")
    if "#" in text or parts.fragment:
        raise InvalidInput("endpoint", f"{endpoint!r} has a fragment; {_ACCEPTED}")
    host = (parts.hostname or "").lower()
    if not host:
        raise InvalidInput("endpoint", f"{endpoint!r} has no host name; {_ACCEPTED}")
    if port is not None and not 1 <= port <= 65535:
        raise InvalidInput("endpoint", f"{endpoint!r} has port {port}; ports are 1-65535")
    bracketed = parts.netloc.rsplit("@", 1)[-1].startswith("[")
    if bracketed or ":" in host:
        if not policy.allow_local:
            raise InvalidInput("endpoint", f"{endpoint!r} is an IPv6 address literal; {_ACCEPTED}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidInput("endpoint", f"{endpoint!r} has a malformed IPv6 literal") from None
        netloc_host = f"[{host}]"
    elif _looks_like_ipv4(host):
        if not policy.allow_local:
            raise InvalidInput("endpoint", f"{endpoint!r} is an IP address literal; {_ACCEPTED}")
        try:
            host = str(ipaddress.IPv4Address(host))
        except ValueError:
            # Shorthand or non-decimal notation: its meaning differs between parsers, so even
            # operators must spell the address out.
            raise InvalidInput("endpoint", f"{endpoint!r}: write IPv4 addresses as four decimal numbers") from None
        netloc_host = host
    else:
        _check_dns_name(host, policy)
        netloc_host = host
    # The operator's local switch lifts the port list only for what it alone allows (plain http,
    # IP literals, local names: test servers on any port); a public https name keeps it.
    local_only = scheme == "http" or netloc_host != host or _looks_like_ipv4(host) or _is_local_name(host)
    if port is not None and not (policy.allow_local and local_only):
        _check_port(port, policy)
    default_port = 443 if scheme == "https" else 80
    suffix = f":{port}" if port is not None and port != default_port else ""
    return f"{scheme}://{netloc_host}{suffix}"


def _check_port(port: int, policy: OperatorPolicy) -> None:
    """Only the operator's ports (`OperatorPolicy.allowed_ports`): an allow-list, so a connection
    test can never tell a customer which other services listen behind a name."""
    if port not in policy.allowed_ports:
        allowed = ", ".join(str(p) for p in sorted(policy.allowed_ports))
        raise InvalidInput(
            "endpoint",
            f"port {port} is not accepted on this deployment; use one of {allowed} (443 by default; 9000 is MinIO's), "
            "or leave the port out for 443",
        )


def _redact_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rsplit('@', 1)[-1]}" if sep else "***"


def system_resolver(host: str, port: int) -> list[str]:
    """All addresses the system resolver gives for ``host`` (A and AAAA), in its order."""
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in answers]


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    """One socket to open. ``address`` is always an IP address that has passed the checks."""

    address: str
    port: int
    timeout: float | None
    source_address: tuple[str, int] | None = None
    socket_options: Sequence[tuple[int, int, int]] = ()


def socket_connector(request: ConnectRequest) -> socket.socket:
    # AI_NUMERICHOST: the address is already an IP; this builds the sockaddr without any lookup.
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        request.address, request.port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        for level, option, value in request.socket_options:
            sock.setsockopt(level, option, value)
        sock.settimeout(request.timeout)
        if request.source_address:
            sock.bind(request.source_address)
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class ConnectGuard:
    """Resolve once, refuse unless every answer is public, connect to a checked address.

    Raises `EndpointRefused` (permanent, nothing was contacted) for a non-public answer,
    ``socket.gaierror`` when the name does not resolve and ``OSError`` when no address accepts.
    """

    policy: OperatorPolicy
    resolver: Resolver = system_resolver
    connector: Connector = socket_connector

    def resolve_checked(self, host: str, port: int) -> list[str]:
        answers = list(dict.fromkeys(self.resolver(host, port)))
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} has no addresses")
        if self.policy.allow_local:
            return answers
        for answer in answers:
            reason = non_public_reason(answer)
            if reason is not None:
                # Any bad answer refuses the whole name: a later connection (or another client)
                # could otherwise be steered to it. The customer learns only that; which address
                # (an internal name's, maybe) goes to the operator's log alone.
                log.warning("endpoint %s refused: resolves to %s (%s)", host, answer, reason)
                raise EndpointRefused(
                    f"endpoint {host} resolves to a non-public address; the endpoint must resolve only to "
                    "public addresses, so nothing was sent"
                )
        return answers

    def connect(
        self,
        host: str,
        port: int,
        timeout: float | None,
        *,
        source_address: tuple[str, int] | None = None,
        socket_options: Sequence[tuple[int, int, int]] = (),
    ) -> socket.socket:
        last_error: OSError | None = None
        for address in self.resolve_checked(host, port):
            try:
                return self.connector(ConnectRequest(address, port, timeout, source_address, socket_options))
            except OSError as exc:
                last_error = exc
        assert last_error is not None  # resolve_checked never returns an empty list
        raise last_error
