"""How each S3-family provider is addressed, and the botocore client built for it.

* `Profile` says how one provider is addressed (endpoint, region, addressing style) and which
  create-only precondition it honours: ``If-None-Match: *`` on AWS, R2, MinIO and other
  S3-compatible stores, and GCS's XML-API equivalent ``x-goog-if-generation-match: 0`` (a
  ``before-sign`` handler rewrites the header, so the signature covers it).
* botocore runs from a session that reads no environment variable and no ``~/.aws`` file (not even
  ``~/.aws/models``): the worker's own credentials, profile, endpoint overrides, checksum settings or
  service models can never leak in. Such a session holds nothing per export, so one per process is
  shared (`_shared_session`); each destination's client still gets its own credentials, event
  handlers and connection pools.
* Bodies are sent as-is with an explicit ``Content-MD5``; flexible checksums are only calculated
  "when required", which ``PutObject`` is not, so there is no aws-chunked framing and no
  ``x-amz-checksum-*`` header or trailer that GCS, B2 or older MinIO would reject.
* botocore's S3 region redirector is switched off (`disable_region_redirect`): it would call
  ``HeadBucket``, which the customer's policy does not grant.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import urlsplit

import botocore.session
from botocore.awsrequest import AWSPreparedRequest
from botocore.client import BaseClient
from botocore.config import Config
from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES, ConfigValueStore, ConstantProvider
from botocore.loaders import Loader

from seqexport_dagster.destination.config import AUTO_REGION, GCS_ENDPOINT, DestinationConfig, endpoint_region
from seqexport_dagster.errors import InvalidInput

if TYPE_CHECKING:
    from seqexport_dagster.destination.policy import AwsIdentity

IF_NONE_MATCH: Final = "If-None-Match"
GCS_GENERATION_MATCH: Final = "x-goog-if-generation-match"
#: S3-compatible stores whose documentation promises no create-only precondition: writes go plain.
_NO_PRECONDITION_HOSTS: Final = (".backblazeb2.com",)


@dataclass(frozen=True, slots=True)
class Profile:
    """How one provider is addressed. Decided from the (validated) config, never from the network."""

    name: str  # "aws", "gcs" or "s3-compatible", for messages
    endpoint_url: str | None  # None: botocore's AWS endpoint for the region
    region: str
    addressing_style: str  # "path" everywhere except AWS
    #: The create-only precondition header the store honours, or None (plain PUT, see runner.py).
    precondition: str | None = IF_NONE_MATCH


def profile_for(config: DestinationConfig) -> Profile:
    if config.provider == "gcs":
        return Profile(
            "gcs", config.endpoint or GCS_ENDPOINT, config.region or AUTO_REGION, "path", GCS_GENERATION_MATCH
        )
    if config.endpoint:
        region = config.region or endpoint_region(config.endpoint)
        host = (urlsplit(config.endpoint).hostname or "").lower()
        plain = any(host.endswith(suffix) for suffix in _NO_PRECONDITION_HOSTS)
        return Profile("s3-compatible", config.endpoint, region, "path", None if plain else IF_NONE_MATCH)
    if not config.region:
        raise InvalidInput("region", "is required for Amazon S3 (for example us-east-1)")
    # "auto" picks virtual-hosted names, but falls back to path-style for bucket names with dots,
    # whose virtual-hosted names do not match AWS's wildcard certificate.
    return Profile("aws", None, config.region, "auto")


def _isolated_session(max_attempts: int, loader: Loader) -> botocore.session.Session:
    """A botocore session that reads no environment variable and no config or credentials file.

    Every setting has a constant value: botocore's default, or ours where it matters. An
    ``AWS_PROFILE`` naming a missing profile, ``AWS_ENDPOINT_URL_S3``,
    ``AWS_REQUEST_CHECKSUM_CALCULATION=when_supported`` or a stray ``~/.aws/credentials`` on a worker
    therefore change nothing.
    """
    session = botocore.session.Session()
    # Only botocore's bundled models: the default search path also reads ~/.aws/models.
    session.register_component("data_loader", loader)
    mapping: dict[str, Any] = {
        name: ConstantProvider(spec[2]) for name, spec in BOTOCORE_DEFAUT_SESSION_VARIABLES.items()
    }
    overrides: dict[str, object] = {
        # os.devnull exists but is not a regular file, so botocore finds "no config" without error.
        "config_file": os.devnull,
        "credentials_file": os.devnull,
        "profile": None,
        "region": None,
        "ca_bundle": None,
        "ignore_configured_endpoint_urls": True,
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        "retry_mode": "standard",
        "max_attempts": max_attempts,
        "csm_enabled": False,
        "ec2_metadata_service_endpoint": None,
    }
    mapping.update({name: ConstantProvider(value) for name, value in overrides.items()})
    mapping["s3"] = ConstantProvider({})
    mapping["proxies_config"] = ConstantProvider({})
    session.register_component("config_store", ConfigValueStore(mapping=mapping))
    return session


class _SessionCache:
    """One isolated session per ``max_attempts`` per process, sharing one model loader.

    Building a session and loading the S3 model, endpoint rules and partitions costs 0.15-0.5 s; a
    client from a warm session costs a few ms. Sharing is safe because an isolated session carries
    nothing of any export: its settings are constants, credentials are passed to each
    ``create_client`` explicitly, and every client gets a copy of the session's event hooks (so one
    destination's ``before-send`` handler never reaches another's client). ``create_client`` itself
    is not thread-safe (it mutates the session's user-agent state and lazily builds components), so
    it runs under a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loader: Loader | None = None
        self._sessions: dict[int, botocore.session.Session] = {}

    def create_client(self, max_attempts: int, service: str = "s3", **kwargs: Any) -> BaseClient:
        with self._lock:
            if self._loader is None:
                self._loader = Loader(extra_search_paths=[Loader.BUILTIN_DATA_PATH], include_default_search_paths=False)
            session = self._sessions.get(max_attempts)
            if session is None:
                session = self._sessions[max_attempts] = _isolated_session(max_attempts, self._loader)
            return session.create_client(service, **kwargs)


# Keyed by process id: a forked child starts its own cache rather than inherit a lock that another
# thread of the parent may have held at the fork.
_session_caches: Final[dict[int, _SessionCache]] = {}


def _shared_session() -> _SessionCache:
    pid = os.getpid()
    cache = _session_caches.get(pid)
    return cache if cache is not None else _session_caches.setdefault(pid, _SessionCache())


def make_client(
    profile: Profile,
    access_key_id: str,
    secret_access_key: str,
    *,
    max_attempts: int,
    connect_timeout: float,
    read_timeout: float,
    session_token: str | None = None,
) -> BaseClient:
    """A client for ``profile`` with explicit credentials (temporary ones carry a session token),
    from the shared isolated session."""
    client_config = Config(
        region_name=profile.region,
        signature_version="s3v4",
        s3=cast(
            Any,
            {
                "addressing_style": profile.addressing_style,
                # Sign the body's SHA-256 even over https: one more integrity check, and some
                # S3-compatible stores reject UNSIGNED-PAYLOAD.
                "payload_signing_enabled": True,
                # The regional name for us-east-1 too, so the host we allow is always
                # <bucket>.s3.<region>.amazonaws.com (or s3.<region>... for dotted bucket names).
                "us_east_1_regional_endpoint": "regional",
            },
        ),
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        proxies={},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        tcp_keepalive=False,
    )
    return _shared_session().create_client(
        max_attempts,
        region_name=profile.region,
        endpoint_url=profile.endpoint_url,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        aws_session_token=session_token,
        verify=True,
        config=client_config,
    )


def make_sts_client(identity: AwsIdentity) -> BaseClient:
    """An STS client signed with the operator's identity (explicit keys, no environment, no proxies)."""
    endpoint = identity.sts_endpoint or f"https://sts.{identity.region}.amazonaws.com"
    return _shared_session().create_client(
        3,
        "sts",
        region_name=identity.region,
        endpoint_url=endpoint,
        aws_access_key_id=identity.access_key_id,
        aws_secret_access_key=identity.secret_access_key,
        aws_session_token=identity.session_token,
        verify=True,
        config=Config(
            region_name=identity.region,
            signature_version="v4",
            retries={"mode": "standard", "total_max_attempts": 3},
            proxies={},
            connect_timeout=10,
            read_timeout=30,
        ),
    )


def disable_region_redirect(context: dict[str, Any] | None = None, **_: object) -> None:
    """Switch off botocore's S3 region redirector for this call.

    It would retry against another region's host and may call ``HeadBucket`` to find the region,
    which the customer's policy does not grant. We report the right region instead. The redirector
    skips requests it believes it already redirected; this marks every request so.
    """
    if context is not None and isinstance(context.get("s3_redirect"), dict):
        context["s3_redirect"]["redirected"] = True


def gcs_generation_match(request: AWSPreparedRequest | Any, **_: object) -> None:
    """GCS's XML API spells "create only" ``x-goog-if-generation-match: 0`` (generation 0: no live
    object). Rewritten before signing, so the SigV4 signature covers the header we send."""
    headers = request.headers
    if headers.get(IF_NONE_MATCH) == "*":
        del headers[IF_NONE_MATCH]
        headers[GCS_GENERATION_MATCH] = "0"
