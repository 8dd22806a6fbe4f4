"""What an operator allows: switches set by the deployment, never from a customer's input."""

from __future__ import annotations

from dataclasses import dataclass

from seqexport_dagster.errors import EndpointRefused


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """Operator-level switches. Never set from a customer's input.

    ``allow_local`` enables the local-directory destination and loopback/private endpoints, for
    tests and the demo only. ``put_deadline_s`` bounds each write to a customer's store, all
    attempts included (``SEQEXPORT_PUT_DEADLINE_SECONDS``).
    """

    allow_local: bool = False
    put_deadline_s: float = 120.0


def require_local_allowed(policy: OperatorPolicy) -> None:
    """Refuse the local-directory destination unless the operator enabled it."""
    if not policy.allow_local:
        raise EndpointRefused("provider: local folders are disabled on this deployment (operator setting)")
