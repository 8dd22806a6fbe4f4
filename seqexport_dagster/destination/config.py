"""`DestinationConfig`: where one export writes, the providers, and every check of a customer's values.

This module owns what a provider means before anything is contacted: the provider names, the URL
scheme each is shown with, the GCS endpoint and the default region of an endpoint (R2's ``auto``),
and the validation run at save time and again before a client is built. It imports neither botocore
nor urllib3, so validating a config stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Final, Literal
from urllib.parse import urlsplit

from seqexport_dagster.destination.azure_sas import (
    SAS_STAND_IN,
    account_endpoint,
    parse_sas,
    validate_account,
    validate_container,
)
from seqexport_dagster.destination.encryption import validate_sse
from seqexport_dagster.destination.endpoint import validate_endpoint
from seqexport_dagster.destination.policy import OperatorPolicy, require_local_allowed
from seqexport_dagster.destination.role import validate_role_arn
from seqexport_dagster.errors import InvalidInput

Provider = Literal["s3", "gcs", "azure", "local"]
PROVIDERS: tuple[Provider, ...] = ("s3", "gcs", "azure", "local")

#: The URL scheme each provider's location is shown with (``gs://`` is Google's own spelling; ``az://``
#: is DuckDB's and fsspec's for Azure Blob, shown with the account's endpoint).
SCHEMES: Final[dict[str, str]] = {"s3": "s3", "gcs": "gs", "azure": "az", "local": "file"}
#: GCS through HMAC keys: always its XML API endpoint, path-style.
GCS_ENDPOINT: Final = "https://storage.googleapis.com"
#: What a store with no region of its own is signed for (GCS, R2).
AUTO_REGION: Final = "auto"
_R2_SUFFIX: Final = ".r2.cloudflarestorage.com"


def stand_in_secret(provider: str) -> str:
    """A placeholder secret of the provider's shape, so `validate_config` can check every other value
    before the real secret is asked for (a prompt comes only once the rest is right)."""
    return SAS_STAND_IN if provider == "azure" else "-"


def endpoint_region(endpoint: str) -> str:
    """The region an S3-compatible endpoint is signed for when none is given: ``auto`` on R2."""
    return AUTO_REGION if endpoint.endswith(_R2_SUFFIX) else "us-east-1"


def describe_location(provider: str, bucket: str, prefix: str, endpoint: str | None) -> str:
    """``s3://bucket/prefix``, ``gs://...`` or ``file://...``, with `` via <endpoint>`` when one is given."""
    where = f"{SCHEMES.get(provider, provider)}://{bucket}/{prefix}".rstrip("/")
    return f"{where} via {endpoint}" if endpoint else where


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """Everything needed to write into one customer's bucket.

    ``secret_access_key`` only ever exists decrypted in memory inside a run or a connection test;
    it is excluded from ``repr`` so it cannot reach a log line by accident.
    """

    provider: Provider
    bucket: str
    prefix: str = ""
    region: str | None = None
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    #: Server-side encryption on every PutObject (`destination.encryption`): None, AES256 or aws:kms.
    sse: str | None = None
    kms_key_id: str | None = None
    #: A role to assume instead of keys (`destination.sts`), with the external id we generated for
    #: this export. Neither is a secret: the customer pastes both into the role's trust policy.
    role_arn: str | None = None
    external_id: str | None = None

    def describe(self) -> str:
        return describe_location(self.provider, self.bucket, self.prefix, self.endpoint)


# \Z, not $: "$" also matches before a trailing newline.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_IPV4_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+\Z")
_PREFIX_SEGMENT_RE = re.compile(r"^[A-Za-z0-9!_.*'()=+,;:@ -]+\Z")
_AWS_REGION_RE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d\Z")
# What botocore accepts as a region (a host label, not all digits); anything else fails inside it.
_REGION_RE = re.compile(r"^(?![0-9]+\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
# AWS (AKIA..., 16-128), GCS HMAC (GOOG1..., 61), R2 (32 hex), B2 (25 hex), MinIO (3+).
_ACCESS_KEY_ID_RE = re.compile(r"^[A-Za-z0-9._+=@-]{1,128}\Z")


def validate_provider(provider: str, policy: OperatorPolicy) -> Provider:
    accepted = PROVIDERS if policy.allow_local else tuple(p for p in PROVIDERS if p != "local")
    if provider not in accepted:
        # `local` is an operator's test switch, never offered to a customer, whatever the setting.
        offered = [p for p in PROVIDERS if p != "local"]
        raise InvalidInput(
            "provider",
            f"{provider!r} is not one of {', '.join(offered)} (for R2, MinIO or B2 choose s3 and set the endpoint)",
        )
    return provider


def validate_bucket(bucket: str) -> str:
    """S3 bucket naming rules (which GCS, R2, B2 and MinIO also accept)."""
    if not _BUCKET_RE.match(bucket):
        raise InvalidInput(
            "bucket",
            f"{bucket!r} is not a valid bucket name: use 3-63 characters of lowercase letters, digits, "
            "'.' and '-', starting and ending with a letter or digit",
        )
    if ".." in bucket or ".-" in bucket or "-." in bucket:
        raise InvalidInput("bucket", f"{bucket!r} is not a valid bucket name: no '..', '.-' or '-.'")
    if _IPV4_RE.match(bucket):
        raise InvalidInput("bucket", f"{bucket!r} is not a valid bucket name: it may not look like an IP address")
    if bucket.startswith("xn--") or bucket.endswith("-s3alias"):
        raise InvalidInput("bucket", f"{bucket!r} is not a valid bucket name: reserved prefix or suffix")
    return bucket


def validate_prefix(prefix: str) -> str:
    """A folder path inside the bucket: no leading '/', no '.' or '..' segments, no empty segments."""
    if prefix == "":
        return ""
    problems = []
    if prefix.startswith("/"):
        problems.append("it may not start with '/'")
    stripped = prefix.rstrip("/")
    segments = stripped.lstrip("/").split("/")
    if any(s in (".", "..") for s in segments):
        problems.append("it may not contain '.' or '..' segments")
    if any(s == "" for s in segments):
        problems.append("it may not contain empty segments ('//')")
    if len(stripped) > 512:
        problems.append("it may be at most 512 characters")
    if not problems and not all(_PREFIX_SEGMENT_RE.match(s) for s in segments):
        problems.append("use letters, digits, spaces and !_.*'()=+,;:@- between '/'")
    if problems:
        raise InvalidInput("prefix", f"{prefix!r} is not a valid prefix: " + "; ".join(problems))
    return stripped


def validate_config(config: DestinationConfig, policy: OperatorPolicy) -> DestinationConfig:
    """Check every customer-given value before anything is contacted or saved."""
    # An unknown name is refused as at save time; `local` is then judged by the operator's policy.
    validate_provider(config.provider, replace(policy, allow_local=True))
    prefix = validate_prefix(config.prefix)
    if config.provider == "local":
        require_local_allowed(policy)
        if not config.bucket:
            raise InvalidInput("bucket", "give the local folder to write into")
        return replace(config, prefix=prefix)
    if config.provider == "azure":
        return _validate_azure(replace(config, prefix=prefix), policy)
    validate_bucket(config.bucket)
    sse, kms_key_id = validate_sse(config.sse, config.kms_key_id, config.provider)
    config = replace(config, sse=sse, kms_key_id=kms_key_id)
    if config.role_arn or config.external_id:
        _validate_role(config, policy)
    elif not config.access_key_id:
        raise InvalidInput("access_key_id", "is required (or a role_arn: see 'Grant a role' in the customer docs)")
    elif not _ACCESS_KEY_ID_RE.match(config.access_key_id):
        raise InvalidInput(
            "access_key_id",
            "is not an access key id: use 1-128 letters, digits and ._+=@- (for example AKIAIOSFODNN7EXAMPLE)",
        )
    if config.region is not None and not _REGION_RE.match(config.region):
        raise InvalidInput(
            "region",
            "is not a region name: use 1-63 letters, digits and '-' (for example us-east-1, auto, eu-central-003)",
        )
    if not config.secret_access_key and not config.role_arn:
        raise InvalidInput("secret_access_key", "is required (prompt, stdin or environment variable)")
    endpoint = config.endpoint
    region = config.region
    if config.provider == "gcs":
        # GCS has one endpoint and signs for "auto": a value given for either would be ignored or
        # would send the data elsewhere under a gs:// name, so it is refused, naming the field.
        if endpoint and policy.allow_local and _is_loopback_url(endpoint):
            # Operators only (SEQEXPORT_ALLOW_LOCAL): a loopback stand-in for GCS in tests of the
            # x-goog precondition path; the CLI shows it with its endpoint (`cli.render.where`).
            endpoint, region = validate_endpoint(endpoint, policy), AUTO_REGION
        elif endpoint not in (None, "", GCS_ENDPOINT):
            raise InvalidInput(
                "endpoint", f"gcs always uses {GCS_ENDPOINT}; leave it empty (for R2 or MinIO choose s3)"
            )
        else:
            endpoint, region = GCS_ENDPOINT, AUTO_REGION
        if config.region not in (None, "", AUTO_REGION):
            raise InvalidInput("region", f"gcs has no region to choose (it signs for {AUTO_REGION!r}); leave it empty")
    elif endpoint:
        endpoint = validate_endpoint(endpoint, policy)
        region = region or endpoint_region(endpoint)
    elif not region:
        raise InvalidInput("region", "is required for Amazon S3 (for example us-east-1)")
    elif not _AWS_REGION_RE.match(region):
        raise InvalidInput("region", f"{region!r} is not an AWS region name such as us-east-1 or eu-west-2")
    return replace(config, prefix=prefix, endpoint=endpoint or None, region=region)


def _validate_azure(config: DestinationConfig, policy: OperatorPolicy) -> DestinationConfig:
    """Azure Blob (`destination.azure_sas`): container, account, SAS token and the account's endpoint."""
    validate_container(config.bucket)
    account = validate_account(config.access_key_id)
    if config.role_arn or config.external_id:
        raise InvalidInput("role_arn", "works with Amazon S3 only (provider s3); azure takes a SAS token")
    if config.region:
        raise InvalidInput("region", "azure has no region to choose (the account has one); leave it empty")
    if config.sse or config.kms_key_id:
        raise InvalidInput(
            "sse",
            "azure encrypts every blob; for your own key use an encryption scope, named in the SAS token "
            "(az storage container generate-sas --encryption-scope), and leave sse empty",
        )
    parse_sas(config.secret_access_key)
    endpoint = account_endpoint(account)
    if config.endpoint:
        endpoint = validate_endpoint(config.endpoint, policy)
        host = urlsplit(endpoint).hostname or ""
        # Operators only (SEQEXPORT_ALLOW_LOCAL): an emulator (Azurite) anywhere, the account then in the path.
        if not host.startswith(f"{account}.") and not policy.allow_local:
            raise InvalidInput(
                "endpoint",
                f"for azure give the account's blob endpoint, {account_endpoint(account)} (or your cloud's, such as "
                f"https://{account}.blob.core.usgovcloudapi.net), or leave it empty",
            )
    return replace(config, endpoint=endpoint, region=None)


_EXTERNAL_ID_RE = re.compile(r"^[A-Za-z0-9+=,.@:/_-]{2,1224}\Z")


def _validate_role(config: DestinationConfig, policy: OperatorPolicy) -> None:
    """A role instead of keys (`destination.sts`): Amazon S3 only, with the export's external id."""
    if not config.role_arn:
        raise InvalidInput("role_arn", "is required with an external_id")
    validate_role_arn(config.role_arn)
    if config.provider != "s3":
        raise InvalidInput("role_arn", "works with Amazon S3 only (provider s3); gcs takes an HMAC key")
    if config.access_key_id or config.secret_access_key:
        raise InvalidInput("role_arn", "give either a role_arn or an access key, not both")
    if config.endpoint and not (policy.allow_local and _is_loopback_url(config.endpoint)):
        raise InvalidInput("endpoint", "a role works with Amazon S3 only; leave the endpoint empty")
    if not config.external_id or not _EXTERNAL_ID_RE.match(config.external_id):
        raise InvalidInput(
            "external_id",
            "is required with a role: use the one Sequenzy generated for you (`seqexport role-setup`), never your own",
        )


def _is_loopback_url(url: str) -> bool:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host in ("127.0.0.1", "localhost", "::1")
