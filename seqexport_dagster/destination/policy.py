"""What an operator allows: switches set by the deployment, never from a customer's input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from seqexport_dagster.errors import ConfigurationError, EndpointRefused

#: Ports an endpoint may name unless the operator says otherwise: HTTPS, and MinIO's default.
DEFAULT_ALLOWED_PORTS: Final = frozenset({443, 9000})


@dataclass(frozen=True, slots=True)
class AwsIdentity:
    """The exporter's own AWS identity (operator settings), used only to call ``sts:AssumeRole``.

    ``principal_arn`` is what customers name in their trust policy (the user or role behind the
    keys). ``sts_endpoint`` is None for AWS's regional endpoint of ``region``.
    """

    access_key_id: str
    secret_access_key: str = field(repr=False)
    principal_arn: str
    session_token: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    sts_endpoint: str | None = None


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """Operator-level switches. Never set from a customer's input.

    ``allow_local`` enables the local-directory destination and loopback/private endpoints, for
    tests and the demo only (it also lifts the port allow-list: test servers listen anywhere).
    ``put_deadline_s`` bounds each write to a customer's store, all attempts included
    (``SEQEXPORT_PUT_DEADLINE_SECONDS``). ``allowed_ports`` are the only ports a customer's endpoint
    may name (``SEQEXPORT_ALLOWED_PORTS``; 443 is always among them): an allow-list, because a
    block list of services' ports leaves every other port open to a probe.
    ``aws_identity`` is the exporter's own AWS identity, used only to assume customers' roles
    (``SEQEXPORT_AWS_*``; None: roles are not offered).
    """

    allow_local: bool = False
    put_deadline_s: float = 120.0
    allowed_ports: frozenset[int] = DEFAULT_ALLOWED_PORTS
    aws_identity: AwsIdentity | None = None


def require_local_allowed(policy: OperatorPolicy) -> None:
    """Refuse the local-directory destination unless the operator enabled it."""
    if not policy.allow_local:
        raise EndpointRefused("provider: local folders are disabled on this deployment (operator setting)")


def parse_ports(text: str) -> frozenset[int]:
    """``443,9000`` as a set of ports (443 always included); empty text: the default."""
    if not text.strip():
        return DEFAULT_ALLOWED_PORTS
    try:
        ports = {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        ports = {0}
    if not ports or not all(1 <= p <= 65535 for p in ports):
        raise ConfigurationError("SEQEXPORT_ALLOWED_PORTS: give TCP ports (1-65535) separated by commas, e.g. 443,9000")
    return frozenset(ports | {443})
