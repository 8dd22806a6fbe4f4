"""What an operator allows: switches set by the deployment, never from a customer's input."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqexport_dagster.errors import EndpointRefused


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
    tests and the demo only. ``put_deadline_s`` bounds each write to a customer's store, all
    attempts included (``SEQEXPORT_PUT_DEADLINE_SECONDS``). ``aws_identity`` is the exporter's own AWS
    identity, used only to assume customers' roles (``SEQEXPORT_AWS_*``; None: roles are not offered).
    """

    allow_local: bool = False
    put_deadline_s: float = 120.0
    aws_identity: AwsIdentity | None = None


def require_local_allowed(policy: OperatorPolicy) -> None:
    """Refuse the local-directory destination unless the operator enabled it."""
    if not policy.allow_local:
        raise EndpointRefused("provider: local folders are disabled on this deployment (operator setting)")
