"""The S3 family (AWS S3, GCS through HMAC keys, R2 / B2 / MinIO) behind one `Destination`.

What the client is allowed to do, and why:

* Only ``PutObject`` ever reaches the wire. A ``before-send`` handler refuses every other
  operation, so neither a botocore customization (region redirects call ``HeadBucket``) nor a future
  change here can quietly need more than the ``s3:PutObject`` grant customers give us.
* The handler also does the sending, through `PinnedSender` (`s3_transport`): pinned, checked
  sockets, no proxies, only the endpoint's host, and one deadline per ``put``.
* The client is built from an isolated botocore session that reads no environment (`s3_client`).
* Every create carries the provider's create-only precondition where it has one (`Profile`). A 412
  is `PutOutcome.EXISTED`: an earlier attempt (or botocore's own retry after a lost answer) landed
  it. A store that answers 501 to the header is remembered as one without preconditions, and the
  write goes plain.
* Every failure leaves ``put`` through `s3_errors.translate`, the one place botocore exceptions
  become our error tree; nothing above this module sees a botocore type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from seqexport_dagster.destination.base import PutOutcome, content_md5
from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.encryption import sse_headers
from seqexport_dagster.destination.endpoint import (
    ConnectGuard,
    Connector,
    Resolver,
    socket_connector,
    system_resolver,
)
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3_client import (
    GCS_GENERATION_MATCH,
    disable_region_redirect,
    gcs_generation_match,
    make_client,
    profile_for,
)
from seqexport_dagster.destination.s3_deadline import bounded_resolver
from seqexport_dagster.destination.s3_errors import Place, store_answer, translate
from seqexport_dagster.destination.s3_transport import PinnedSender
from seqexport_dagster.destination.sts import RoleAssumer, TemporaryCredentials, assumer_for
from seqexport_dagster.errors import AccessDenied, DestinationError, InvalidInput


class S3Destination:
    """Writes objects with ``PutObject`` into an S3-family bucket. See the module docstring."""

    def __init__(
        self,
        config: DestinationConfig,
        policy: OperatorPolicy,
        *,
        resolver: Resolver = system_resolver,
        connector: Connector = socket_connector,
        max_attempts: int = 3,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        verify: bool | str = True,
        deadline_s: float | None = None,
        assumer: RoleAssumer | None = None,
        session_name: str = "sequenzy-export",
    ) -> None:
        if config.provider not in ("s3", "gcs"):
            raise InvalidInput("provider", f"{config.provider!r} is not an S3-family provider (s3, gcs)")
        self._assumer: RoleAssumer | None = None
        if config.role_arn:
            # A role: temporary credentials from STS as the operator's identity (destination.sts).
            self._assumer = assumer or assumer_for(policy.aws_identity)
        # Empty credentials would make botocore fall back to the worker's own; refuse first.
        elif not config.access_key_id:
            raise InvalidInput("access_key_id", "is required")
        elif not config.secret_access_key:
            raise InvalidInput("secret_access_key", "is required (prompt, stdin or environment variable)")
        # Re-validated here as well as at save time: whatever path built this config, no unchecked
        # endpoint, bucket or prefix reaches botocore.
        self.config = validate_config(config, policy)
        self.profile = profile_for(self.config)
        self._place = Place(
            where=self.profile.endpoint_url or f"Amazon S3 ({self.profile.region})",
            bucket=self.config.bucket,
            prefix=self.config.prefix,
            region=self.profile.region,
            access_key_id=config.access_key_id,
            kms_key_id=self.config.kms_key_id,
            secret=config.secret_access_key,
            role_arn=config.role_arn,
        )
        self._timeouts = (max_attempts, connect_timeout, read_timeout)
        self._session_name = session_name
        self._credentials: TemporaryCredentials | None = None
        # With a role the first client is never used to send: every put asks for credentials first.
        self._client = self._open_client(config.access_key_id or "pending-role", config.secret_access_key or "-", None)
        endpoint_host = (urlsplit(self._client.meta.endpoint_url).hostname or "").lower()
        allowed = {endpoint_host}
        if self.profile.name == "aws":
            allowed.add(f"{self.config.bucket}.{endpoint_host}")
        self._sender = PinnedSender(
            ConnectGuard(policy, bounded_resolver(resolver), connector),
            frozenset(allowed),
            verify=verify,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            deadline_s=policy.put_deadline_s if deadline_s is None else deadline_s,
        )
        self.preconditions = self.profile.precondition is not None
        self._sends = 0

    def _open_client(self, access_key_id: str, secret: str, session_token: str | None) -> Any:
        max_attempts, connect_timeout, read_timeout = self._timeouts
        client = make_client(
            self.profile,
            access_key_id,
            secret,
            max_attempts=max_attempts,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            session_token=session_token,
        )
        client.meta.events.register("before-call.s3", disable_region_redirect)
        if self.profile.precondition == GCS_GENERATION_MATCH:
            client.meta.events.register("before-sign.s3.PutObject", gcs_generation_match)
        send: Callable[..., Any] = self._send
        client.meta.events.register("before-send.s3", send)
        return client

    def _fresh_client(self) -> Any:
        """The client to send with: for a role, rebuilt whenever the cached credentials were refreshed
        (before they expire, so a window never meets an expired token)."""
        if self._assumer is None or not self.config.role_arn or not self.config.external_id:
            return self._client
        current = self._assumer.credentials(self.config.role_arn, self.config.external_id, self._session_name)
        if current is not self._credentials:
            old, self._client = (
                self._client,
                self._open_client(current.access_key_id, current.secret_access_key, current.session_token),
            )
            old.close()
            self._credentials = current
            self._place = replace(self._place, secret=current.secret_access_key)
        return self._client

    def _send(self, request: AWSPreparedRequest, event_name: str = "", **_: object) -> AWSResponse:
        if not event_name.endswith(".PutObject"):
            operation = event_name.rsplit(".", 1)[-1] or "an unknown operation"
            raise DestinationError(f"refusing to send {operation}: this exporter only ever uses PutObject")
        self._sends += 1
        return self._sender.send(request)

    def put(self, key: str, body: bytes, *, create_only: bool = True, retried: bool = False) -> PutOutcome:
        prefix = self.config.prefix
        if not key or (prefix and not key.startswith(prefix + "/")):
            raise InvalidInput("key", f"{key!r} is not below the export prefix {prefix!r}")
        conditional = create_only and self.preconditions
        extra: dict[str, str] = {"IfNoneMatch": "*"} if conditional else {}
        extra.update(sse_headers(self.config.sse, self.config.kms_key_id))
        self._sends = 0
        try:
            client = self._fresh_client()
            with self._sender.budget():
                client.put_object(
                    Bucket=self.config.bucket,
                    Key=key,
                    Body=body,
                    ContentMD5=content_md5(body),
                    ContentType=_content_type(key),
                    **extra,
                )
        except Exception as exc:
            answer = store_answer(exc)
            if answer is None:
                raise translate(exc, key, self._place) from None
            if conditional and (answer.status == 412 or answer.code == "PreconditionFailed"):
                return PutOutcome.EXISTED
            if self._assumer is not None and answer.code in ("ExpiredToken", "TokenRefreshRequired") and not retried:
                # The store thinks the role's credentials expired (clock drift): assume again, once.
                self._assumer.forget(self.config.role_arn or "", self.config.external_id or "")
                return self.put(key, body, create_only=create_only, retried=True)
            if conditional and (answer.status == 501 or answer.code == "NotImplemented"):
                self.preconditions = False  # this store has no create-only precondition
                return self.put(key, body, create_only=create_only)
            error = translate(exc, key, self._place)
            if isinstance(error, AccessDenied):
                # botocore sent it more than once: an earlier send may have landed the object, and a
                # key that may not overwrite is then refused. runner.py probes before believing it.
                error.outcome_unknown = self._sends > 1
            raise error from None
        return PutOutcome.CREATED

    def describe(self) -> str:
        return self.config.describe()

    def close(self) -> None:
        self._sender.close()
        self._client.close()


def _content_type(key: str) -> str:
    if key.endswith(".gz"):
        return "application/gzip"
    if key.endswith(".txt"):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"
