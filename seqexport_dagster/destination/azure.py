"""Azure Blob Storage behind the one `Destination`: Put Blob with a SAS token, nothing else.

Why a few lines of REST rather than ``azure-storage-blob``: a put is one request (``PUT
<account>/<container>/<blob>?<sas>`` with ``x-ms-blob-type: BlockBlob``), and sending it through the
S3 family's `s3_transport.PinnedSender` gives Azure the same endpoint safety with no new code path:
the name resolved once within the put's deadline and refused unless every answer is public, the
socket pinned to the checked address, only the account's host contacted, no proxies, no redirects,
one deadline per put and a capped answer. The SDK brings its own transport (requests or aiohttp)
with proxies from the environment, redirects followed and retries of its own, which would all have
to be taken apart again; and it would split large bodies into block lists.

What every put carries, and why (DESIGN §4):

* Single shot: Put Blob, never Put Block/Put Block List, so no uncommitted blocks are ever left
  behind; a part is at most about 5 MB, far under Put Blob's 5,000 MiB.
* ``If-None-Match: *`` on every create: a blob that is there answers 409 ``BlobAlreadyExists`` (412
  ``ConditionNotMet`` on some paths), which is `PutOutcome.EXISTED` (an earlier attempt landed it).
  Under a create-only SAS (``sp=c``) Azure checks the permission first and answers 403
  ``AuthorizationPermissionMismatch`` instead (Azurite does); that 403 after a re-send is marked
  ``outcome_unknown``, and the runner's probe tells it from a revoked token, as on an S3 create-only key.
* ``Content-MD5``: Azure checks it and refuses a changed body (400 ``Md5Mismatch``, retried).
* ``x-ms-version``: a fixed service version, so the answers do not change under us.

A SAS token travels in the URL's query, so it never reaches a message: `azure_errors` and
`s3_errors.Place.clean` scrub the whole token and any ``sig=``, and urllib3's debug lines are
filtered (`azure_sas.SAS_LOG_FILTER`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any, Final, cast
from urllib.parse import quote, urlsplit

from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import (
    ConnectionClosedError,
    EndpointConnectionError,
    HTTPClientError,
)
from botocore.exceptions import ConnectTimeoutError as BotoConnectTimeoutError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError

from seqexport_dagster.destination.azure_errors import azure_answer, existed, retryable, translate_answer
from seqexport_dagster.destination.azure_sas import API_VERSION, SAS_LOG_FILTER, normalize_sas, parse_sas
from seqexport_dagster.destination.base import PutOutcome, content_md5
from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.endpoint import (
    ConnectGuard,
    Connector,
    Resolver,
    socket_connector,
    system_resolver,
)
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3_deadline import bounded_resolver
from seqexport_dagster.destination.s3_errors import Place, translate
from seqexport_dagster.destination.s3_transport import PinnedSender
from seqexport_dagster.errors import AccessDenied, InvalidInput

_TRANSIENT: Final = (
    EndpointConnectionError,
    BotoConnectTimeoutError,
    BotoReadTimeoutError,
    ConnectionClosedError,
    HTTPClientError,
)


class AzureDestination:
    """Creates blobs with Put Blob in an Azure container through a SAS token. See the module docstring."""

    preconditions = True

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
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        if config.provider != "azure":
            raise InvalidInput("provider", f"{config.provider!r} is not azure")
        # Re-validated here as well as at save time: whatever path built this config, no unchecked
        # endpoint, container, prefix or token reaches the wire.
        self.config = validate_config(config, policy)
        self._sas_text = normalize_sas(config.secret_access_key or "")
        self._sas = parse_sas(self._sas_text)
        account = self.config.access_key_id or ""
        endpoint = self.config.endpoint or ""
        host = (urlsplit(endpoint).hostname or "").lower()
        # <account>.blob...: the account is the host; a loopback emulator (Azurite) takes it as the
        # first path segment instead.
        account_path = "" if host.startswith(f"{account}.") else f"/{account}"
        self._container_url = f"{endpoint}{account_path}/{self.config.bucket}"
        self._place = Place(
            where=endpoint,
            bucket=self.config.bucket,
            prefix=self.config.prefix,
            region="",
            access_key_id=account,
            secret=self._sas_text,
        )
        self._sender = PinnedSender(
            ConnectGuard(policy, bounded_resolver(resolver), connector),
            frozenset({host}),
            verify=verify,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            deadline_s=policy.put_deadline_s if deadline_s is None else deadline_s,
        )
        self._max_attempts = max(1, max_attempts)
        self._clock = clock
        logging.getLogger("urllib3.connectionpool").addFilter(SAS_LOG_FILTER)

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        prefix = self.config.prefix
        if not key or (prefix and not key.startswith(prefix + "/")):
            raise InvalidInput("key", f"{key!r} is not below the export prefix {prefix!r}")
        headers = {
            "x-ms-version": API_VERSION,
            "x-ms-blob-type": "BlockBlob",
            "Content-MD5": content_md5(body),
            "Content-Type": _content_type(key),
            "Content-Length": str(len(body)),
        }
        if create_only:
            headers["If-None-Match"] = "*"
        url = f"{self._container_url}/{quote(key, safe='/')}?{self._sas_text}"
        with self._sender.budget():
            for send in range(1, self._max_attempts + 1):
                last = send == self._max_attempts
                request = AWSPreparedRequest("PUT", url, cast(Any, headers), body, stream_output=False)
                try:
                    response = self._sender.send(request)
                except _TRANSIENT as exc:
                    if last:
                        raise translate(exc, key, self._place) from None
                    time.sleep(0.1 * 2**send)
                    continue
                except Exception as exc:  # ours (refused, too slow, too large) pass as they are
                    raise translate(exc, key, self._place) from None
                if 200 <= response.status_code < 300:
                    return PutOutcome.CREATED
                answer = azure_answer(response.status_code, dict(response.headers.items()), response.content)
                if create_only and existed(answer):
                    return PutOutcome.EXISTED
                if retryable(answer) and not last:
                    time.sleep(0.1 * 2**send)
                    continue
                error = translate_answer(answer, key, self._place, self._sas, self._clock())
                if isinstance(error, AccessDenied):
                    # Sent more than once: an earlier send may have created the blob, and a create-only
                    # SAS refuses the re-send with 403. runner.py probes before believing it.
                    error.outcome_unknown = send > 1
                raise error
        raise AssertionError("unreachable")  # pragma: no cover

    def describe(self) -> str:
        return self.config.describe()

    def close(self) -> None:
        self._sender.close()


def _content_type(key: str) -> str:
    if key.endswith(".gz"):
        return "application/gzip"
    if key.endswith(".txt"):
        return "text/plain; charset=utf-8"
    if key.endswith(".parquet"):
        return "application/vnd.apache.parquet"
    return "application/octet-stream"
