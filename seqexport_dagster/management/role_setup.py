"""Role exports in the Python API: issuing an external id, and the role fields of a destination change.

`Exports` (api.py) calls these; they hold the rules that are only about roles, so the API module
keeps one job per method. The external id is ours (`store.external_ids`): a role setup issues it for
the account, the customer pastes it into the role's trust policy, and creating the export (or moving
one onto a role) takes it.
"""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa

from seqexport_dagster.contract.validation import validate_account
from seqexport_dagster.destination import DestinationConfig, OperatorPolicy
from seqexport_dagster.destination.policy import AwsIdentity
from seqexport_dagster.destination.role import RoleSetup, aws_account_of
from seqexport_dagster.errors import ConflictError, InvalidInput
from seqexport_dagster.store.external_ids import check_external_id, issue_external_id, take_external_id
from seqexport_dagster.store.rate_limit import ROLE_SETUP, admit


def role_setup(engine: sa.Engine, policy: OperatorPolicy, account_id: str, now_ms: int) -> RoleSetup:
    """A fresh external id for the account; at most `ROLE_SETUP` per account and hour (each one is a
    row in the control plane until an export takes it or `maintain` prunes it)."""
    validate_account(account_id)
    identity = _roles_offered(policy)
    admit(engine, ROLE_SETUP, account_id, now_ms)
    return RoleSetup(account_id, issue_external_id(engine, account_id, now_ms), identity.principal_arn)


def _roles_offered(policy: OperatorPolicy) -> AwsIdentity:
    """The operator's identity; without one, a role is refused as not possible here (409), not as a
    fault of the service: the customer can give an access key instead."""
    if policy.aws_identity is None:
        raise ConflictError(
            "this deployment offers no AWS roles (its operator has not configured an AWS identity, "
            "SEQEXPORT_AWS_*); give an access key instead"
        )
    return policy.aws_identity


def with_role_change(
    current: DestinationConfig,
    changed: DestinationConfig,
    *,
    role_arn: str | None,
    external_id: str | None,
    new_key: bool,
) -> DestinationConfig:
    """``changed`` with the role fields a destination change asks for.

    ``role_arn``: None keeps the current role (unless a new access key replaces it), ``""`` drops it.
    A role keeps the export's external id; an export moving onto a role for the first time needs one
    from a role setup. A role never travels with keys, and keys never with a role.
    """
    role = current.role_arn if role_arn is None and not new_key else (role_arn or None)
    if role is None:
        if external_id:
            raise InvalidInput("external_id", "is only used with a role_arn")
        return replace(changed, role_arn=None, external_id=None)
    ext = external_id or current.external_id
    return replace(changed, role_arn=role, external_id=ext, access_key_id=None, secret_access_key=None)


def check_role(
    engine: sa.Engine,
    policy: OperatorPolicy,
    account_id: str,
    config: DestinationConfig,
    export_id: str | None = None,
) -> None:
    if config.role_arn and config.external_id:
        identity = _roles_offered(policy)
        if not policy.allow_local:  # tests and demos: moto keeps every role in one account
            _not_our_account(config.role_arn, identity)
        check_external_id(engine, account_id, config.external_id, export_id)


def _not_our_account(role_arn: str, identity: AwsIdentity) -> None:
    """A role in the exporter's own AWS account is never a customer's: assuming it would write with
    our own permissions (a confused deputy the external id cannot stop, since the trust policy is ours)."""
    ours = aws_account_of(identity.principal_arn)
    if ours is not None and aws_account_of(role_arn) == ours:
        raise InvalidInput(
            "role_arn",
            f"is in Sequenzy's own AWS account ({ours}); give a role in your AWS account, the one that owns the bucket",
        )


def take_role(engine: sa.Engine, account_id: str, config: DestinationConfig, export_id: str) -> None:
    if config.role_arn and config.external_id:
        take_external_id(engine, account_id, config.external_id, export_id)
