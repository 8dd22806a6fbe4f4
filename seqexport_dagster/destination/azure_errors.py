"""The one boundary where Azure Blob's answers become our error tree, in the customer's words.

Azure names its refusal in the ``x-ms-error-code`` header (and again in the XML body); the codes
that matter to a customer get a message that says what to change: the SAS's permission, its expiry,
the container, the account. Retryable: throttling (``ServerBusy``, 429), 5xx and ``Md5Mismatch``
(the body changed in transit; sending it again is the cure). Everything else is permanent.
Transport failures are the S3 family's (`s3_errors.translate`), since both send through
`s3_transport.PinnedSender`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from seqexport_dagster.destination.azure_sas import Sas
from seqexport_dagster.errors import (
    AccessDenied,
    BadCredentials,
    DestinationError,
    ExportError,
    NoSuchBucket,
    RetryableError,
)

if TYPE_CHECKING:  # verify reads Azure answers too, without loading botocore
    from seqexport_dagster.destination.s3_errors import Place

#: A create-only Put Blob that found the blob there: an earlier attempt landed it.
EXISTED_CODES: Final = frozenset({"BlobAlreadyExists", "ConditionNotMet"})
_RETRYABLE_CODES: Final = frozenset(
    {"ServerBusy", "InternalError", "OperationTimedOut", "Md5Mismatch", "IncrementalCopyOfEarlierVersionSnapshot"}
)
_AUTH_CODES: Final = frozenset({"AuthenticationFailed", "AuthorizationFailure", "InvalidAuthenticationInfo"})
_CODE_RE: Final = re.compile(r"<Code>([^<]{1,100})</Code>")
_MESSAGE_RE: Final = re.compile(r"<Message>([^<\r\n]{1,300})")


@dataclass(frozen=True, slots=True)
class AzureAnswer:
    status: int
    code: str
    message: str


def azure_answer(status: int, headers: dict[str, str], body: bytes) -> AzureAnswer:
    """The error code (header first, then the XML body) and the first line of the message."""
    text = body.decode("utf-8", "replace")
    code = headers.get("x-ms-error-code", "")
    if not code:
        found = _CODE_RE.search(text)
        code = found.group(1) if found else ""
    message = _MESSAGE_RE.search(text)
    return AzureAnswer(status, code.strip(), message.group(1).strip() if message else "")


def existed(answer: AzureAnswer) -> bool:
    """The answer to a create-only put (``If-None-Match: *``) when the blob is there."""
    return answer.status in (409, 412) and (answer.code in EXISTED_CODES or not answer.code)


def retryable(answer: AzureAnswer) -> bool:
    return answer.code in _RETRYABLE_CODES or answer.status >= 500 or answer.status == 429


def translate_answer(answer: AzureAnswer, key: str, place: Place, sas: Sas, now: dt.datetime) -> ExportError:
    """An error answer to Put Blob of ``key`` as one of ours, with a message a customer can act on."""
    code, status = answer.code, answer.status
    message = place.clean(answer.message)
    account, container = place.access_key_id, place.bucket  # the account is the export's access_key_id
    blob = f"{container}/{key}"
    token = "the user delegation SAS" if sas.delegation else "the SAS token"
    if code == "ContainerNotFound" or (status == 404 and code in ("", "ResourceNotFound")):
        return NoSuchBucket(
            f"container {container} does not exist in storage account {account} at {place.where}: create it "
            "(see 'Azure Blob Storage' in the customer docs)"
        )
    if status in (401, 403) and sas.expired(now):
        return BadCredentials(
            f"{token} expired at {sas.expiry}: create a new one with the create (c) permission and rotate it "
            "(seqexport change <export> --secret-prompt)"
        )
    if status in (401, 403) and sas.not_yet_valid(now):
        return BadCredentials(f"{token} is valid only from {sas.start}; its start time is in the future")
    if code == "AuthorizationPermissionMismatch":
        # Under a create-only token Azure also answers this for a blob that is already there; a re-send
        # is marked outcome_unknown by the caller and the runner's probe tells the two apart.
        says = (
            f"it says {sas.permissions!r}" if sas.permissions else f"its stored access policy {sas.policy} gives them"
        )
        return AccessDenied(
            f"{token} may not create {blob}: it needs the create (c) permission on container {container} "
            f"({says}; a stored access policy may have narrowed or revoked it). A blob that is already there is "
            "never overwritten"
        )
    if code == "AuthorizationResourceTypeMismatch":
        return AccessDenied(f"{token} does not cover blob objects: an account SAS needs resource type o (srt=o)")
    if code == "AuthorizationServiceMismatch":
        return AccessDenied(f"{token} does not cover the blob service: an account SAS needs service b (ss=b)")
    if code == "AuthorizationSourceIPMismatch":
        return AccessDenied(
            f"{token} is limited to IP addresses that do not include this exporter's; widen or drop sip"
        )
    if code == "AuthorizationProtocolMismatch":
        return AccessDenied(f"{token} does not allow HTTPS: create it with --https-only (spr=https)")
    if code == "KeyBasedAuthenticationNotPermitted":
        return AccessDenied(
            f"storage account {account} does not accept SAS tokens signed with an account key; create a user "
            "delegation SAS instead (az storage container generate-sas --as-user --auth-mode login)"
        )
    if code in ("AccountIsDisabled", "ContainerDisabled", "ContainerBeingDeleted"):
        what = f"storage account {account}" if code == "AccountIsDisabled" else f"container {container}"
        return DestinationError(f"{what} is disabled or being deleted ({code}): nothing can be written there")
    if code in _AUTH_CODES or status == 401:
        return BadCredentials(
            f"storage account {account} refused {token} ({code or status}): it is not valid for container "
            f"{container}, or its signature does not match (signed with a key rotated since, or for another "
            "account or container), or the account's firewall does not admit this exporter"
        )
    if code in ("BlobImmutableDueToPolicy", "BlobImmutableDueToLegalHold") or status == 403:
        return AccessDenied(
            f"access denied for Put Blob on {blob} ({code or status})" + (f": {message}" if message else "")
        )
    if 300 <= status < 400:
        return DestinationError(
            f"{place.where} answered with a redirect, which is never followed: check the account's endpoint"
        )
    if retryable(answer):
        return RetryableError(f"{place.where} is busy or failing ({code or status}): {message or 'try again later'}")
    return DestinationError(
        f"{place.where} refused Put Blob of {blob}: {code or status}" + (f": {message}" if message else "")
    )
