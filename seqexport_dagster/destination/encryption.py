"""Server-side encryption per export: what a customer may ask for, and the headers it becomes.

Two choices, both S3's own: ``AES256`` (SSE-S3, keys managed by S3) and ``aws:kms`` (SSE-KMS) with
the customer's key. With SSE-KMS, S3 calls ``kms:GenerateDataKey`` on the key *as the writer*, so the
customer grants that one KMS action to us next to ``s3:PutObject`` (docs/customers.md). Every
``PutObject`` of the export carries the headers, the connection test file included, so a key we may
not use fails the connection test instead of the first window.

A key is named by its key ARN (recommended: a key in another account can only be named so), its
key id, or an alias (``alias/name`` or its ARN). The value is not a secret; it is shown in status.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from seqexport_dagster.errors import InvalidInput

Sse = Literal["AES256", "aws:kms"]
SSE_S3: Final = "AES256"
SSE_KMS: Final = "aws:kms"
SSE_CHOICES: Final[tuple[Sse, ...]] = (SSE_S3, SSE_KMS)

_KEY_ID = r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})"
_ALIAS = r"alias/[A-Za-z0-9/_-]{1,250}"
_ARN = r"arn:aws(?:-[a-z]+)*:kms:[a-z]{2}(?:-[a-z]+)+-\d:\d{12}:"
_KMS_KEY_RE: Final = re.compile(rf"^(?:{_KEY_ID}|{_ALIAS}|{_ARN}(?:key/{_KEY_ID}|{_ALIAS}))\Z")
_EXAMPLE: Final = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def validate_sse(sse: str | None, kms_key_id: str | None, provider: str) -> tuple[Sse | None, str | None]:
    """``(sse, kms_key_id)`` checked together; ``None``/``""`` for both means the bucket's default."""
    sse = sse or None
    kms_key_id = kms_key_id or None
    if sse is None:
        if kms_key_id is not None:
            raise InvalidInput("kms_key_id", "is only used with sse aws:kms; set sse to aws:kms or leave the key out")
        return None, None
    if sse not in SSE_CHOICES:
        raise InvalidInput(
            "sse",
            f"{sse[:40]!r} is not one of AES256 (SSE-S3) or aws:kms (SSE-KMS, with kms_key_id); leave it out for the bucket's default",
        )
    if provider == "gcs":
        raise InvalidInput("sse", "gcs encrypts every object itself; leave sse out for gcs")
    if sse == SSE_S3:
        if kms_key_id is not None:
            raise InvalidInput("kms_key_id", "is only used with sse aws:kms, not AES256")
        return SSE_S3, None
    if kms_key_id is None:
        raise InvalidInput("kms_key_id", f"is required with sse aws:kms: the key's ARN, for example {_EXAMPLE}")
    if not _KMS_KEY_RE.match(kms_key_id):
        raise InvalidInput(
            "kms_key_id",
            f"is not a KMS key: give the key ARN (for example {_EXAMPLE}), a key id or alias/<name>",
        )
    return SSE_KMS, kms_key_id


def sse_headers(sse: str | None, kms_key_id: str | None) -> dict[str, str]:
    """The ``put_object`` parameters for the export's encryption (none for the bucket's default)."""
    if sse is None:
        return {}
    if sse == SSE_KMS and kms_key_id:
        return {"ServerSideEncryption": SSE_KMS, "SSEKMSKeyId": kms_key_id}
    return {"ServerSideEncryption": sse}


def describe_sse(sse: str | None, kms_key_id: str | None) -> str:
    """For people: ``SSE-KMS (arn:...)``, ``SSE-S3 (AES256)`` or the bucket's default."""
    if sse == SSE_KMS:
        return f"SSE-KMS ({kms_key_id})"
    if sse == SSE_S3:
        return "SSE-S3 (AES256)"
    return "bucket default"
