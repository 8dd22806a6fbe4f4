"""Writing as the customer's role: STS ``AssumeRole`` with the export's external id, cached.

An export may name a ``role_arn`` instead of access keys. The exporter then signs its PutObjects
with temporary credentials of that role, which it gets from STS as *its own* AWS identity
(`AwsIdentity`, operator configuration: ``SEQEXPORT_AWS_*``). That identity is the one place a
worker's own credentials are ever used, and it is used for ``sts:AssumeRole`` only; S3 always sees
the customer's role.

The external id is ours: generated per export, shown to the customer for the role's trust policy
(``sts:ExternalId``), never chosen by them. It is AWS's defence against the confused deputy: another
Sequenzy customer who learns the role's ARN still cannot make us write into it.

`RoleAssumer` caches each role's credentials until `REFRESH_BEFORE_MS` before they expire, and is
shared by every destination of a process (`assumer_for`), so a run of many windows assumes the role
once an hour, and a destination asks before every PutObject: credentials that would expire within
the margin are refreshed before the request, never after a refusal, so no window is dropped.
Errors leave through `_translate`: a trust policy that does not allow us, or a wrong external id,
is `RoleNotAssumable` with the trust policy's conditions in the customer's words; STS refusing our
own identity (`OPERATOR_FAULTS`, also answered 403) is the operator's `ConfigurationError`, never
"fix your trust policy".

Every session has its own ``RoleSessionName`` (`session_name`: the destination's base name and a
nonce), so the customer's CloudTrail tells our sessions apart.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.destination.policy import AwsIdentity
from seqexport_dagster.destination.role import trust_policy
from seqexport_dagster.errors import ConfigurationError, ExportError, RetryableError, RoleNotAssumable

__all__ = ["AwsIdentity", "RoleAssumer", "TemporaryCredentials", "assume_role_call", "assumer_for", "trust_policy"]

#: Refresh this long before the credentials expire (botocore's own mandatory refresh is 10 min).
REFRESH_BEFORE_MS: Final = 10 * 60_000
#: What we ask STS for; roles allow at least one hour.
DURATION_S: Final = 3600
#: STS's answers that refuse the exporter's own identity (keys wrong, mistyped or expired), not the
#: customer's role. STS answers them 403 too, so they are told apart by code first.
OPERATOR_FAULTS: Final = frozenset({"InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken"})


def session_name(base: str) -> str:
    """``base`` plus a nonce, at most 64 characters of ``[\\w+=,.@-]`` (STS's rule)."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_+=,.@-") else "-" for ch in base)
    return f"{safe[:47]}-{secrets.token_hex(8)}"


@dataclass(frozen=True, slots=True)
class TemporaryCredentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expires_at_ms: int


StsCall = Callable[[AwsIdentity, dict[str, Any]], dict[str, Any]]


class RoleAssumer:
    """Temporary credentials per (role, external id), refreshed `REFRESH_BEFORE_MS` before expiry.

    ``clock`` and ``call`` are seams for tests: a settable clock moves across an expiry in the
    middle of a run; ``call`` is `assume_role_call` (botocore) by default.
    """

    def __init__(
        self,
        identity: AwsIdentity,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        call: StsCall | None = None,
        duration_s: int = DURATION_S,
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.duration_s = duration_s
        self._call = call or assume_role_call
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], TemporaryCredentials] = {}
        #: How many times STS was called (successfully), for tests and metrics.
        self.assumed = 0

    def credentials(self, role_arn: str, external_id: str, base_session_name: str) -> TemporaryCredentials:
        key = (role_arn, external_id)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and self.clock() < cached.expires_at_ms - REFRESH_BEFORE_MS:
                return cached
            params = {
                "RoleArn": role_arn,
                "RoleSessionName": session_name(base_session_name),
                "ExternalId": external_id,
                "DurationSeconds": self.duration_s,
            }
            try:
                answer = self._call(self.identity, params)
            except ExportError:
                raise
            except Exception as exc:
                raise _translate(exc, role_arn, external_id, self.identity) from None
            found = answer["Credentials"]
            expires = found["Expiration"]
            expires_ms = int(expires.timestamp() * 1000) if hasattr(expires, "timestamp") else int(expires)
            fresh = TemporaryCredentials(
                found["AccessKeyId"], found["SecretAccessKey"], found["SessionToken"], expires_ms
            )
            self._cache[key] = fresh
            self.assumed += 1
            return fresh

    def forget(self, role_arn: str, external_id: str) -> None:
        with self._lock:
            self._cache.pop((role_arn, external_id), None)


def assume_role_call(identity: AwsIdentity, params: dict[str, Any]) -> dict[str, Any]:
    """``sts:AssumeRole`` as the operator's identity, from the isolated botocore session."""
    from seqexport_dagster.destination.s3_client import make_sts_client

    client = make_sts_client(identity)
    try:
        answer: dict[str, Any] = client.assume_role(**params)  # type: ignore[attr-defined]
    finally:
        client.close()
    return answer


_assumers: Final[dict[AwsIdentity, RoleAssumer]] = {}
_assumers_lock: Final = threading.Lock()


def assumer_for(identity: AwsIdentity | None) -> RoleAssumer:
    """The process's shared `RoleAssumer` for the operator's identity."""
    if identity is None:
        raise ConfigurationError(
            "this deployment has no AWS identity to assume customers' roles with: set SEQEXPORT_AWS_ACCESS_KEY_ID, "
            "SEQEXPORT_AWS_SECRET_ACCESS_KEY and SEQEXPORT_AWS_PRINCIPAL_ARN (operator settings)"
        )
    with _assumers_lock:
        found = _assumers.get(identity)
        if found is None:
            found = _assumers[identity] = RoleAssumer(identity)
        return found


def _translate(exc: Exception, role_arn: str, external_id: str, identity: AwsIdentity) -> ExportError:
    """botocore's answer from STS as one of ours; never echoes the operator's secret."""
    from seqexport_dagster.destination.s3_errors import store_answer

    answer = store_answer(exc)
    if answer is None:
        return RetryableError(f"cannot reach AWS STS to assume role {role_arn}: {type(exc).__name__}")
    if answer.code in OPERATOR_FAULTS:
        return ConfigurationError(
            f"the exporter's own AWS identity was refused by STS ({answer.code}): check SEQEXPORT_AWS_ACCESS_KEY_ID "
            "and SEQEXPORT_AWS_SECRET_ACCESS_KEY (operator settings); nothing is wrong with the customer's role"
        )
    if answer.code in ("AccessDenied", "AccessDeniedException") or answer.status == 403:
        return RoleNotAssumable(
            f"cannot assume role {role_arn}: its trust policy must allow {identity.principal_arn} to call "
            f"sts:AssumeRole with the condition sts:ExternalId = {external_id} (this export's external id; "
            "see 'Grant a role' in the customer docs). Check the role ARN, the principal and the external id"
        )
    if answer.code in ("Throttling", "ThrottlingException", "RequestLimitExceeded") or answer.status >= 500:
        return RetryableError(f"AWS STS is busy ({answer.code or answer.status}); assuming role {role_arn} again later")
    return RoleNotAssumable(f"cannot assume role {role_arn}: STS answered {answer.code or answer.status}")
