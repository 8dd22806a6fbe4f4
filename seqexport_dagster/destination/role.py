"""Role exports as values: the role ARN's rules, the trust policy a customer pastes, a role setup.

Pure: no botocore, so validating a config stays cheap. The STS side is `destination.sts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from seqexport_dagster.errors import InvalidInput

_ROLE_ARN_RE: Final = re.compile(r"^arn:aws(?:-[a-z]+)*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}\Z")
EXAMPLE_ROLE_ARN: Final = "arn:aws:iam::111122223333:role/sequenzy-exports"


def validate_role_arn(role_arn: str) -> str:
    if not _ROLE_ARN_RE.match(role_arn):
        raise InvalidInput(
            "role_arn",
            f"is not an IAM role ARN: give it as arn:aws:iam::<account-id>:role/<name>, e.g. {EXAMPLE_ROLE_ARN}",
        )
    return role_arn


def aws_account_of(arn: str) -> str | None:
    """The 12-digit account of an IAM or STS ARN (``arn:aws:iam::111122223333:role/x``), or None."""
    parts = arn.split(":")
    if len(parts) >= 6 and parts[0] == "arn" and len(parts[4]) == 12 and parts[4].isascii() and parts[4].isdigit():
        return parts[4]
    return None


def trust_policy(principal_arn: str, external_id: str) -> dict[str, Any]:
    """The trust policy a customer pastes on the role: only us, and only with this export's external id."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": principal_arn},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class RoleSetup:
    """What a customer pastes before creating a role export: the external id we generated, and the
    trust policy that allows only our principal, only with that id."""

    account_id: str
    external_id: str
    principal_arn: str

    @property
    def trust_policy(self) -> dict[str, Any]:
        return trust_policy(self.principal_arn, self.external_id)
