"""S3's SSE-KMS permission check, which moto does not model, as a `FaultProxy` gate.

On AWS, a ``PutObject`` with ``x-amz-server-side-encryption: aws:kms`` makes S3 call
``kms:GenerateDataKey`` on the named key *as the caller*: a writer whose policy lacks that action is
refused with 403 AccessDenied, even though it may ``s3:PutObject``. moto stores the headers but never
asks. This gate asks: it finds the principal that signed the request (the access key id in its
``Authorization`` header), reads that principal's policies from moto's IAM with a full-rights
client, and evaluates them with moto's own policy evaluator (`moto.iam.access_control.IAMPolicy`)
for ``kms:GenerateDataKey`` on the key. So the least-privilege proof covers the KMS grant the
customer docs ask for, with the same documents moto enforces for S3.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from moto.iam.access_control import IAMPolicy, PermissionResult

_CREDENTIAL_RE = re.compile(r"Credential=([A-Z0-9]+)/")


@dataclass
class KmsGate:
    """``principals`` maps an access key id to ``("user", name)`` or ``("role", name)``."""

    iam: Any  # a boto3 IAM client with rights to read every policy
    principals: dict[str, tuple[str, str]] = field(default_factory=dict)
    checked: list[tuple[str, str, bool]] = field(default_factory=list)

    def __call__(self, method: str, path: str, headers: Any) -> tuple[int, str, str] | None:
        if method != "PUT" or headers.get("x-amz-server-side-encryption") != "aws:kms":
            return None
        key_arn = headers.get("x-amz-server-side-encryption-aws-kms-key-id") or "*"
        found = _CREDENTIAL_RE.search(headers.get("Authorization") or "")
        access_key_id = found.group(1) if found else ""
        allowed = self.allows(access_key_id, key_arn)
        self.checked.append((access_key_id, key_arn, allowed))
        if allowed:
            return None
        kind, name = self.principals.get(access_key_id, ("user", "unknown"))
        return (
            403,
            "AccessDenied",
            f"User: arn:aws:iam::123456789012:{kind}/{name} is not authorized to perform: kms:GenerateDataKey "
            f"on resource: {key_arn} because no identity-based policy allows the kms:GenerateDataKey action",
        )

    def allows(self, access_key_id: str, key_arn: str) -> bool:
        principal = self.principals.get(access_key_id)
        if principal is None:
            return False
        permitted = False
        for document in self._documents(*principal):
            result = IAMPolicy(document).is_action_permitted("kms:GenerateDataKey", key_arn)
            if result == PermissionResult.DENIED:
                return False
            permitted = permitted or result == PermissionResult.PERMITTED
        return permitted

    def _documents(self, kind: str, name: str) -> list[str]:
        if kind == "user":
            names = self.iam.list_user_policies(UserName=name)["PolicyNames"]
            docs = [self.iam.get_user_policy(UserName=name, PolicyName=n)["PolicyDocument"] for n in names]
        else:
            names = self.iam.list_role_policies(RoleName=name)["PolicyNames"]
            docs = [self.iam.get_role_policy(RoleName=name, PolicyName=n)["PolicyDocument"] for n in names]
        return [d if isinstance(d, str) else json.dumps(d) for d in docs]
