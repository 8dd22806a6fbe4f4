"""Request bodies. Every field is validated again by `api.Exports` (which names the field and what it
accepts); these models give the OpenAPI document its shapes and refuse unknown fields."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

_STRICT = ConfigDict(extra="forbid")


class CreateExport(BaseModel):
    model_config = _STRICT

    account_id: str | None = Field(
        None, description="an account token's own account (may be left out); required with an operator token"
    )
    provider: str = Field("s3", description="s3 (AWS, or S3-compatible with endpoint) or gcs")
    bucket: str
    prefix: str = ""
    region: str | None = None
    endpoint: str | None = Field(None, description="S3-compatible endpoint, e.g. https://<id>.r2.cloudflarestorage.com")
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = Field(None, description="accepted here only; never returned or logged")
    datasets: list[str] | str = Field("all", description="a list, a comma-separated string, or 'all'")
    frequency: str = Field("1h", description="15m, 1h, 6h or 24h")
    lag_ms: int = Field(120_000, description="trail real time by this much, 0 to 3,600,000 ms")
    format: str = Field("jsonl.gz", description="jsonl.gz (gzip JSON Lines, the default) or parquet (zstd)")

    def fingerprint_body(self) -> dict[str, Any]:
        body = self.model_dump(exclude={"secret_access_key"})
        body["secret_access_key"] = self.secret_access_key.get_secret_value() if self.secret_access_key else None
        return body


class ChangeDatasets(BaseModel):
    model_config = _STRICT

    add: list[str] = Field(default_factory=list, description="datasets to add; each starts from now")
    remove: list[str] = Field(default_factory=list, description="datasets to stop; their files stay")


class ChangeFrequency(BaseModel):
    model_config = _STRICT

    frequency: str = Field(description="15m, 1h, 6h or 24h; positions are kept, so the chain stays gap-free")


class ChangeFormat(BaseModel):
    model_config = _STRICT

    format: str = Field(description="jsonl.gz or parquet; from each dataset's next window, none is split")


class ChangeDestination(BaseModel):
    """A value left out is kept; "" clears prefix, region or endpoint. A new key id needs its secret."""

    model_config = _STRICT

    provider: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    region: str | None = None
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = Field(None, description="accepted here only; never returned or logged")
