"""The `Destination` protocol and the settings that select an implementation.

A destination knows one operation, ``put``: the exporter only ever creates objects (the customer's
policy grants ``s3:PutObject`` and nothing else). Keys given to ``put`` are complete object keys,
prefix included; `seqexport_dagster.window` builds them.

Write-once: ``put`` creates and never replaces, unless an operator asked to replace. Where the store
offers a create-only precondition (``preconditions``), every create carries it, and an object that
is already there comes back as `PutOutcome.EXISTED` instead of being overwritten.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Literal, Protocol
from urllib.parse import urlsplit

from seqexport_dagster.errors import EndpointRefused, InvalidInput

Provider = Literal["s3", "gcs", "local"]
PROVIDERS: tuple[Provider, ...] = ("s3", "gcs", "local")


class PutOutcome(StrEnum):
    CREATED = "created"
    #: The store refused the create-only write because the key exists: an earlier attempt landed it.
    EXISTED = "existed"


class Destination(Protocol):
    #: Whether the store enforces create-only writes (a precondition), so a re-sent part answers
    #: `PutOutcome.EXISTED` instead of replacing (or, on a create-only key, being refused 403).
    preconditions: bool

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        """Write ``body`` under ``key`` atomically; raise an `ExportError` on refusal.

        ``create_only`` (the default, and all the runner ever asks for outside an operator's
        replace) never replaces an object where the store can enforce it.
        """

    def describe(self) -> str:
        """Where this writes, for people: ``s3://bucket/prefix``. Never includes a secret."""

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """Operator-level switches. Never set from a customer's input.

    ``allow_local`` enables the local-directory destination and loopback/private endpoints, for
    tests and the demo only. ``put_deadline_s`` bounds each write to a customer's store, all
    attempts included (``SEQEXPORT_PUT_DEADLINE_SECONDS``).
    """

    allow_local: bool = False
    put_deadline_s: float = 120.0


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

    def fingerprint(self) -> str:
        """Identifies the location and key; changes whenever bucket, prefix or credentials change."""
        material = "\0".join(
            str(v)
            for v in (
                self.provider,
                self.bucket,
                self.prefix,
                self.region,
                self.endpoint,
                self.access_key_id,
                self.secret_access_key,
            )
        )
        return hashlib.sha256(material.encode()).hexdigest()[:16]

    def describe(self) -> str:
        scheme = {"s3": "s3", "gcs": "gs", "local": "file"}[self.provider]
        where = f"{scheme}://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} via {self.endpoint}" if self.endpoint else where

    def without_secret(self) -> DestinationConfig:
        return replace(self, secret_access_key=None)


# \Z, not $: "$" also matches before a trailing newline.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_IPV4_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+\Z")
_PREFIX_SEGMENT_RE = re.compile(r"^[A-Za-z0-9!_.*'()=+,;:@ -]+\Z")
_AWS_REGION_RE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d\Z")
# What botocore accepts as a region (a host label, not all digits); anything else fails inside it.
_REGION_RE = re.compile(r"^(?![0-9]+\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
# AWS (AKIA..., 16-128), GCS HMAC (GOOG1..., 61), R2 (32 hex), B2 (25 hex), MinIO (3+).
_ACCESS_KEY_ID_RE = re.compile(r"^[A-Za-z0-9._+=@-]{1,128}\Z")


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
    if config.provider not in PROVIDERS:
        raise InvalidInput("provider", f"{config.provider!r} is not one of s3, gcs (local for operators only)")
    prefix = validate_prefix(config.prefix)
    if config.provider == "local":
        if not policy.allow_local:
            raise EndpointRefused("provider: local folders are disabled on this deployment (operator setting)")
        if not config.bucket:
            raise InvalidInput("bucket", "give the local folder to write into")
        return replace(config, prefix=prefix)
    validate_bucket(config.bucket)
    if not config.access_key_id:
        raise InvalidInput("access_key_id", "is required")
    if not _ACCESS_KEY_ID_RE.match(config.access_key_id):
        raise InvalidInput(
            "access_key_id",
            "is not an access key id: use 1-128 letters, digits and ._+=@- (for example AKIAIOSFODNN7EXAMPLE)",
        )
    if config.region is not None and not _REGION_RE.match(config.region):
        raise InvalidInput(
            "region",
            "is not a region name: use 1-63 letters, digits and '-' (for example us-east-1, auto, eu-central-003)",
        )
    if not config.secret_access_key:
        raise InvalidInput("secret_access_key", "is required (prompt, stdin or environment variable)")
    from seqexport_dagster.destination.endpoint import validate_endpoint

    endpoint = config.endpoint
    region = config.region
    if config.provider == "gcs":
        if endpoint and policy.allow_local and _is_loopback_url(endpoint):
            # Operators only: a loopback stand-in for GCS (tests of the x-goog precondition path).
            endpoint, region = validate_endpoint(endpoint, policy), region or "auto"
        elif endpoint not in (None, "", "https://storage.googleapis.com"):
            raise InvalidInput("endpoint", "gcs always uses https://storage.googleapis.com; leave it empty")
        else:
            endpoint, region = "https://storage.googleapis.com", region or "auto"
    elif endpoint:
        endpoint = validate_endpoint(endpoint, policy)
        region = region or ("auto" if endpoint.endswith(".r2.cloudflarestorage.com") else "us-east-1")
    elif not region:
        raise InvalidInput("region", "is required for Amazon S3 (for example us-east-1)")
    elif not _AWS_REGION_RE.match(region):
        raise InvalidInput("region", f"{region!r} is not an AWS region name such as us-east-1 or eu-west-2")
    return replace(config, prefix=prefix, endpoint=endpoint or None, region=region)


def _is_loopback_url(url: str) -> bool:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host in ("127.0.0.1", "localhost", "::1")


def open_destination(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
    if config.provider == "local":
        if not policy.allow_local:
            raise EndpointRefused("provider: local folders are disabled on this deployment (operator setting)")
        from seqexport_dagster.destination.local import LocalDestination

        return LocalDestination(config.bucket)
    from seqexport_dagster.destination.s3 import S3Destination

    return S3Destination(config, policy)
