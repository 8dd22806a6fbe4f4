"""The one boundary where botocore's exceptions become our error tree.

Everything the S3 family can raise (a store's error answer, or a transport failure from
`seqexport_dagster.destination.s3_transport`) is translated here into an `ExportError` with a message
a customer can act on; nothing above sees a botocore type. `verify` reads buckets with the
customer's own client and names its failures with `error_summary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, cast

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    SSLError,
)
from botocore.exceptions import ConnectTimeoutError as BotoConnectTimeoutError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError

from seqexport_dagster.destination.azure_sas import redact_sas
from seqexport_dagster.destination.redaction import mask_key_id, redact_secrets
from seqexport_dagster.errors import (
    AccessDenied,
    BadCredentials,
    ClockSkew,
    DestinationError,
    EndpointUnreachable,
    ExportError,
    InvalidInput,
    NoSuchBucket,
    RetryableError,
)

_RETRYABLE_CODES: Final = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "OperationAborted",
        "BadDigest",  # the body changed in transit; sending it again is the cure
        "ConditionalRequestConflict",  # a concurrent conditional write; AWS says retry
        "500",
        "502",
        "503",
        "504",
    }
)
_ACCESS_CODES: Final = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "403", "Forbidden"})
_REDIRECT_CODES: Final = frozenset({"PermanentRedirect", "TemporaryRedirect", "301", "302", "307"})


@dataclass(frozen=True, slots=True)
class StoreAnswer:
    """The error code and HTTP status a store answered with."""

    code: str
    status: int


def store_answer(exc: BaseException) -> StoreAnswer | None:
    """The store's error answer carried by ``exc``, or None when ``exc`` is not one (a transport failure)."""
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return StoreAnswer(code, status)


def error_summary(exc: BaseException) -> str:
    """``Code: Message`` of a store's error answer, or the exception's type name (its text may carry anything)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".rstrip(": ")
    return type(exc).__name__


@dataclass(frozen=True, slots=True)
class Place:
    """What a translated message names: where the store is, the bucket and prefix, and whose key."""

    where: str  # the endpoint, or "Amazon S3 (<region>)"
    bucket: str
    prefix: str
    region: str
    access_key_id: str | None
    #: The export's SSE-KMS key: writing needs kms:GenerateDataKey on it as well.
    kms_key_id: str | None = None
    #: Never shown: scrubbed from whatever a store echoes, and kept out of ``repr``.
    secret: str | None = field(default=None, repr=False)
    #: Writing as a role (`destination.sts`): messages name the role instead of a key.
    role_arn: str | None = None

    @property
    def writer(self) -> str:
        return f"role {self.role_arn}" if self.role_arn else f"access key {mask_key_id(self.access_key_id)}"

    def clean(self, text: str) -> str:
        # A store cannot echo the secret (it is never sent), but an odd one may echo anything it got;
        # keep the guarantee here rather than trusting every server.
        # A SAS signature (Azure's, in a request URL a transport error may quote) goes too.
        return redact_sas(redact_secrets(text, [self.secret]))


def translate(exc: Exception, key: str, place: Place) -> ExportError:
    """``exc`` (raised writing ``key``) as one of ours, with a message a customer can act on."""
    if isinstance(exc, ExportError):
        return exc
    inner = exc.kwargs.get("error") if isinstance(exc, HTTPClientError) else None
    if isinstance(inner, ExportError):
        return inner
    where, clean = place.where, place.clean
    if isinstance(exc, ClientError):
        return _translate_client_error(exc, key, place)
    if isinstance(exc, EndpointConnectionError | BotoConnectTimeoutError):
        reason = clean(str(exc.kwargs.get("error", exc)))
        return EndpointUnreachable(f"cannot reach {where}: {reason}")
    if isinstance(exc, BotoReadTimeoutError | ConnectionClosedError):
        return RetryableError(f"connection to {where} was interrupted: {clean(str(exc))}")
    if isinstance(exc, SSLError):
        return DestinationError(f"TLS with {where} failed: {clean(str(exc))}")
    if isinstance(exc, HTTPClientError):
        return RetryableError(f"HTTP error talking to {where}: {clean(str(exc))}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return BadCredentials("the access key id and secret are both required")
    if isinstance(exc, ParamValidationError):
        return InvalidInput("key", clean(str(exc)))
    if isinstance(exc, BotoCoreError):
        return DestinationError(f"{where}: {clean(str(exc))}")
    return DestinationError(f"unexpected error writing {key}: {type(exc).__name__}: {clean(str(exc))}")


def _translate_client_error(exc: ClientError, key: str, place: Place) -> ExportError:
    error: dict[str, Any] = cast(dict[str, Any], exc.response.get("Error", {}))
    code = str(error.get("Code", ""))
    message = place.clean(str(error.get("Message", "") or ""))
    meta = exc.response.get("ResponseMetadata", {})
    status = int(meta.get("HTTPStatusCode", 0) or 0)
    where, bucket, prefix = place.where, place.bucket, place.prefix
    scope = f"{bucket}/{prefix}/*" if prefix else f"{bucket}/*"
    if code == "NoSuchBucket" or (status == 404 and code in ("", "404")):
        return NoSuchBucket(f"bucket {bucket} does not exist at {where} (or is not visible to this key)")
    if code == "InvalidAccessKeyId":
        return BadCredentials(f"{place.writer} is not known to {where}")
    if code == "SignatureDoesNotMatch":
        return BadCredentials(f"bad signature: the secret does not match the {place.writer}")
    if code == "RequestTimeTooSkewed":
        return ClockSkew(
            "the store refused our request time: this worker's clock is off by more than 15 minutes; "
            "fix the clock (NTP), the export will then resume"
        )
    if code in _ACCESS_CODES:
        kms = f" and kms:GenerateDataKey on the KMS key {place.kms_key_id}" if place.kms_key_id else ""
        return AccessDenied(
            f"access denied for s3:PutObject on {bucket}/{key}: the policy of {place.writer} "
            f"must allow s3:PutObject on {scope}{kms}"
            + (f" ({message})" if message and message != "Access Denied" else "")
        )
    if code == "AuthorizationHeaderMalformed" and error.get("Region"):
        return DestinationError(
            f"bucket {bucket} is in region {error['Region']}, not {place.region}; change the export's region"
        )
    if code in _REDIRECT_CODES or 300 <= status < 400:
        headers = meta.get("HTTPHeaders", {})
        region = headers.get("x-amz-bucket-region") or error.get("Region")
        hint = (
            f"bucket {bucket} is in region {region}, not {place.region}; change the export's region"
            if region
            else "check the bucket's region and endpoint"
        )
        return DestinationError(f"{where} answered with a redirect, which is never followed: {hint}")
    if code in _RETRYABLE_CODES or status >= 500 or status == 429:
        return RetryableError(f"{where} is busy or failing ({code or status}): {message or 'try again later'}")
    return DestinationError(
        f"{where} refused PutObject of {bucket}/{key}: {code or status}" + (f": {message}" if message else "")
    )
