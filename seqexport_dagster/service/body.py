"""Request bodies. Every field is validated again by `api.Exports` (which names the field and what it
accepts); these models give the OpenAPI document its shapes, refuse unknown fields, and bound every
value before anything else looks at it: each string has a length cap (secrets included), types are
strict (``"datasets": "email_events"`` is not a list, ``"60000"`` is not a number), and lists are short.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints

from seqexport_dagster.store.webhook_records import MAX_FAILING_AFTER

_STRICT = ConfigDict(extra="forbid", strict=True)

#: Longest accepted values: the control plane's column sizes, or less where the provider's own is less.
MAX_ACCOUNT: Final = 64
MAX_BUCKET: Final = 222  # GCS allows dotted names up to 222; S3 63
MAX_PREFIX: Final = 512
MAX_ENDPOINT: Final = 512
MAX_KEY_ID: Final = 256
#: AWS secrets are 40 characters, GCS HMAC secrets 40, R2 64; an Azure SAS token 100 to about 450 (a
#: user delegation SAS is the longest): `destination.azure_sas.MAX_SAS_LENGTH`.
MAX_SECRET: Final = 2048
MAX_DATASETS: Final = 8


Account = Annotated[str, StringConstraints(strict=True, max_length=MAX_ACCOUNT)]
Provider = Annotated[str, StringConstraints(strict=True, max_length=16)]
Bucket = Annotated[str, StringConstraints(strict=True, max_length=MAX_BUCKET)]
Prefix = Annotated[str, StringConstraints(strict=True, max_length=MAX_PREFIX)]
Region = Annotated[str, StringConstraints(strict=True, max_length=64)]
Endpoint = Annotated[str, StringConstraints(strict=True, max_length=MAX_ENDPOINT)]
KeyId = Annotated[str, StringConstraints(strict=True, max_length=MAX_KEY_ID)]
Frequency = Annotated[str, StringConstraints(strict=True, max_length=8)]
Dataset = Annotated[str, StringConstraints(strict=True, max_length=32)]
Secret = Annotated[SecretStr, Field(max_length=MAX_SECRET)]
Datasets = Annotated[list[Dataset], Field(max_length=MAX_DATASETS)]
Sse = Annotated[str, StringConstraints(strict=True, max_length=16)]
#: IAM role and KMS key ARNs are at most 2,048 characters; an external id at most 1,224.
Arn = Annotated[str, StringConstraints(strict=True, max_length=2048)]
ExternalId = Annotated[str, StringConstraints(strict=True, max_length=1224)]
Table = Annotated[str, StringConstraints(strict=True, max_length=16)]
_SSE = "server-side encryption on every object: AES256 (SSE-S3) or aws:kms (SSE-KMS, with kms_key_id)"
_ROLE = "Amazon S3: a role to assume instead of keys (its trust policy comes from POST /v1/role-setups)"
_EXTERNAL_ID = "with role_arn: the external id POST /v1/role-setups generated for this account"
_KMS = "with sse aws:kms: the KMS key ARN (we need kms:GenerateDataKey on it)"
_TABLE = "delta: a Delta Lake table per dataset (with format parquet); null or none: files only"


class CreateExport(BaseModel):
    model_config = _STRICT

    account_id: Account | None = Field(
        None, description="an account token's own account (may be left out); required with an operator token"
    )
    provider: Provider = Field("s3", description="s3 (AWS, or S3-compatible with endpoint), gcs or azure")
    bucket: Bucket
    prefix: Prefix = ""
    region: Region | None = None
    endpoint: Endpoint | None = Field(
        None, description="S3-compatible endpoint, e.g. https://<id>.r2.cloudflarestorage.com"
    )
    access_key_id: KeyId | None = None
    secret_access_key: Secret | None = Field(None, description="accepted here only; never returned or logged")
    datasets: Datasets | Literal["all"] = Field("all", description="a list of datasets, or 'all'")
    frequency: Frequency = Field("1h", description="15m, 1h, 6h or 24h")
    lag_ms: int = Field(120_000, description="trail real time by this much, 0 to 3,600,000 ms")
    sse: Sse | None = Field(None, description=_SSE)
    kms_key_id: Arn | None = Field(None, description=_KMS)
    role_arn: Arn | None = Field(None, description=_ROLE)
    external_id: ExternalId | None = Field(None, description=_EXTERNAL_ID)
    format: str = Field("jsonl.gz", description="jsonl.gz (gzip JSON Lines, the default) or parquet (zstd)")
    table: Table | None = Field(None, description=_TABLE)

    def fingerprint_body(self) -> dict[str, Any]:
        """The request as the Idempotency-Key fingerprint sees it: everything but the secret. No
        table is left out, so a repeat of a request made before the field existed stays the same."""
        body = self.model_dump(exclude={"secret_access_key"})
        if body["table"] is None:
            del body["table"]
        return body


class NewRoleSetup(BaseModel):
    model_config = _STRICT

    account_id: Account | None = Field(
        None, description="an account token's own account; required with an operator token"
    )


class ChangeDatasets(BaseModel):
    model_config = _STRICT

    add: Datasets = Field(default_factory=list, description="datasets to add; each starts from now")
    remove: Datasets = Field(default_factory=list, description="datasets to stop; their files stay")


class ChangeFrequency(BaseModel):
    model_config = _STRICT

    frequency: Frequency = Field(description="15m, 1h, 6h or 24h; positions are kept, so the chain stays gap-free")


class ChangeFormat(BaseModel):
    model_config = _STRICT

    format: str = Field(description="jsonl.gz or parquet; from each dataset's next window, none is split")


class ChangeTable(BaseModel):
    model_config = _STRICT

    table: Table | None = Field(
        description="delta: a Delta Lake table per dataset from its next commit (Parquet exports only); "
        "null or none: stop (the log written stays)"
    )


class ChangeDestination(BaseModel):
    """A value left out is kept; "" clears prefix, region or endpoint. A new key id needs its secret."""

    model_config = _STRICT

    provider: Provider | None = None
    bucket: Bucket | None = None
    prefix: Prefix | None = None
    region: Region | None = None
    endpoint: Endpoint | None = None
    access_key_id: KeyId | None = None
    secret_access_key: Secret | None = Field(None, description="accepted here only; never returned or logged")
    sse: Sse | None = Field(None, description=_SSE + '; "" for the bucket\'s default')
    kms_key_id: Arn | None = Field(None, description=_KMS)
    role_arn: Arn | None = Field(None, description=_ROLE + '; "" drops the role (give an access key)')
    external_id: ExternalId | None = Field(None, description=_EXTERNAL_ID)


def accepted(field: str) -> str | None:
    """What a body field accepts, in the words the OpenAPI document gives (for error messages)."""
    for model in (CreateExport, ChangeDatasets, ChangeFrequency, ChangeDestination):
        info = model.model_fields.get(field)
        if info is not None and info.description:
            return info.description
    return None


WebhookUrl = Annotated[str, StringConstraints(strict=True, max_length=2048)]
EventType = Annotated[str, StringConstraints(strict=True, max_length=64)]


class CreateWebhook(BaseModel):
    """A webhook endpoint: where, and which events (default every type). The answer holds its secret, once."""

    model_config = _STRICT
    account_id: Account | None = Field(default=None, description="an operator token names the account")
    url: WebhookUrl = Field(description="https:// URL with a public DNS name; a path and query are allowed")
    events: Annotated[list[EventType], Field(max_length=8)] | None = Field(
        default=None, description='event types, or omit (or ["*"]) for every type'
    )
    description: Annotated[str, StringConstraints(strict=True, max_length=256)] | None = None
    failing_after: Annotated[int, Field(strict=True, ge=1, le=MAX_FAILING_AFTER)] | None = Field(
        default=None, description="consecutive failures of a dataset that send export.failing (1 to 100, default 3)"
    )

    def fingerprint_body(self) -> dict[str, Any]:
        return self.model_dump()
