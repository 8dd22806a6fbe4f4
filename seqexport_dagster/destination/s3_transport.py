"""Sending botocore's requests to a customer's endpoint, pinned and bounded.

The endpoint is the customer's and may be hostile, so:

* Requests go through urllib3 pools whose sockets go through `ConnectGuard` (resolve once, refuse
  non-public answers, connect to the checked IP). Proxies are never consulted, and a request for any
  host other than the endpoint (or ``<bucket>.<endpoint>`` on AWS) is refused, so no redirect can
  move an upload elsewhere.
* Every request is bounded: one deadline per ``put`` covers name lookup, connect, TLS, sending and
  the whole answer across botocore's retries (`s3_deadline.Watch` shuts the socket down when it passes, so an
  answer dripped a byte a second cannot keep it open), and at most `MAX_RESPONSE_BYTES` of an answer
  are read (an S3 answer is a few hundred bytes; past the cap the connection is dropped, so a 400 MB
  answer costs 16 KB of memory).

Transport failures leave here as botocore's own exceptions, so botocore's standard retry mode still
retries them; `seqexport_dagster.destination.s3_errors` translates them into our error tree.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Final, cast
from urllib.parse import urlsplit

from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
    AWSPreparedRequest,
    AWSResponse,
)
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, HTTPClientError, SSLError
from botocore.exceptions import ConnectTimeoutError as BotoConnectTimeoutError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError
from botocore.httpsession import get_cert_path
from urllib3 import PoolManager, Timeout
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError as Urllib3ConnectTimeoutError
from urllib3.exceptions import NameResolutionError, NewConnectionError, ProtocolError
from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeoutError
from urllib3.exceptions import SSLError as Urllib3SSLError
from urllib3.util.retry import Retry

from seqexport_dagster.destination.endpoint import ConnectGuard
from seqexport_dagster.destination.s3_deadline import Budget, Watch, watching
from seqexport_dagster.errors import EndpointRefused, EndpointTooSlow, ExportError, ResponseTooLarge

#: Read at most this much of any answer. PutObject answers with an empty body, errors with about
#: 300-2,000 bytes of XML (GCS's longest, with its string-to-sign); anything past this is not S3.
MAX_RESPONSE_BYTES: Final = 16 * 1024
#: Default wall-clock limit of one ``put`` (all attempts): connect, TLS, upload and the whole answer.
#: A 50,000-line part is about 5 MB, so this still allows a 50 KB/s uplink.
DEFAULT_PUT_DEADLINE_S: Final = 120.0


def _conn_timeout(value: object) -> float | None:
    # urllib3 uses a sentinel object for "the socket module's default"; that means blocking (None).
    return float(value) if isinstance(value, int | float) else None


def _pinned_new_conn(conn: Any, guard: ConnectGuard) -> socket.socket:
    """The body of urllib3's ``HTTPConnection._new_conn``, with the guard in place of DNS."""
    sock = _guarded_connect(conn, guard)
    watch = watching()
    if watch is not None:
        watch.add_socket(sock)
    return sock


def _guarded_connect(conn: Any, guard: ConnectGuard) -> socket.socket:
    try:
        return guard.connect(
            conn.host,
            conn.port,
            _conn_timeout(conn.timeout),
            source_address=conn.source_address,
            socket_options=tuple(conn.socket_options or ()),
        )
    except socket.gaierror as exc:
        raise NameResolutionError(conn.host, conn, exc) from exc
    except TimeoutError as exc:
        raise Urllib3ConnectTimeoutError(
            conn, f"Connection to {conn.host} timed out. (connect timeout={conn.timeout})"
        ) from exc
    except OSError as exc:
        raise NewConnectionError(conn, f"Failed to establish a new connection: {exc}") from exc


def pinned_pool_classes(guard: ConnectGuard) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 pool classes (botocore's own, so 100-continue still works) whose sockets go through
    ``guard``. Assign to ``PoolManager.pool_classes_by_scheme``. Plain http is offered only under
    ``allow_local``; otherwise an http URL has no pool class and cannot be opened at all."""

    class PinnedHTTPSConnection(AWSHTTPSConnection):
        def _new_conn(self) -> socket.socket:
            return _pinned_new_conn(self, guard)

        def request(self, *args: Any, **kwargs: Any) -> Any:
            _watch_connection(self)
            return super().request(*args, **kwargs)

    class PinnedHTTPSConnectionPool(AWSHTTPSConnectionPool):
        ConnectionCls = PinnedHTTPSConnection

    classes: dict[str, type[HTTPConnectionPool]] = {"https": PinnedHTTPSConnectionPool}
    if guard.policy.allow_local:

        class PinnedHTTPConnection(AWSHTTPConnection):
            def _new_conn(self) -> socket.socket:
                return _pinned_new_conn(self, guard)

            def request(self, *args: Any, **kwargs: Any) -> Any:
                _watch_connection(self)
                return super().request(*args, **kwargs)

        class PinnedHTTPConnectionPool(AWSHTTPConnectionPool):
            ConnectionCls = PinnedHTTPConnection

        classes["http"] = PinnedHTTPConnectionPool
    return classes


def _watch_connection(conn: Any) -> None:
    """A reused keep-alive connection opens no socket: watch the one it has."""
    watch = watching()
    if watch is not None:
        watch.add_connection(conn)


class _Body:
    """The already-read answer, in the shape `AWSResponse` reads it from (``stream()``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, *_: object, **__: object) -> Any:
        return iter((self._data,))


class PinnedSender:
    """Sends botocore's prepared requests through guarded urllib3 pools, within a deadline.

    Raises botocore's own transport exceptions (so botocore's standard retry mode still retries
    resets and timeouts), or one of ours, which botocore does not retry: `EndpointRefused`,
    `EndpointTooSlow` (the put's deadline passed; every later attempt of that put is refused at
    once) and `ResponseTooLarge`.
    """

    def __init__(
        self,
        guard: ConnectGuard,
        allowed_hosts: frozenset[str],
        *,
        verify: bool | str = True,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_pool_connections: int = 4,
        deadline_s: float = DEFAULT_PUT_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        truncate_answer: bool = False,
    ) -> None:
        self._allowed_hosts = allowed_hosts
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self.deadline_s = deadline_s
        self._max_response_bytes = max_response_bytes
        # A webhook receiver's answer is not ours to judge past its status: cut it at the cap and
        # keep the status, instead of refusing it (`ResponseTooLarge`) as an S3 answer is.
        self._truncate_answer = truncate_answer
        self._budget = threading.local()
        self._manager = PoolManager(
            num_pools=4,
            maxsize=max_pool_connections,
            timeout=Timeout(connect=connect_timeout, read=read_timeout),
            cert_reqs="CERT_REQUIRED",
            ca_certs=verify if isinstance(verify, str) else get_cert_path(True),
        )
        # Replaces the plain pools: every socket this manager opens goes through the guard.
        self._manager.pool_classes_by_scheme = pinned_pool_classes(guard)

    def budget(self) -> Budget:
        """One deadline for everything sent inside the ``with`` (all attempts of one put)."""
        return Budget(self._budget, time.monotonic() + self.deadline_s)

    def send(self, request: AWSPreparedRequest) -> AWSResponse:
        until: float | None = getattr(self._budget, "until", None)
        remaining = (until if until is not None else time.monotonic() + self.deadline_s) - time.monotonic()
        host = (urlsplit(request.url).hostname or "").lower()
        if remaining <= 0:
            raise self._too_slow(host)
        with Watch(remaining) as watch:
            try:
                response = self._send(request, remaining)
            except ExportError:
                raise
            except Exception:
                if watch.expired:
                    raise self._too_slow(host) from None
                raise
        if watch.expired:  # an answer cut short by the shutdown may look complete
            raise self._too_slow(host)
        return response

    def _too_slow(self, host: str) -> EndpointTooSlow:
        return EndpointTooSlow(
            f"{host} did not complete the request within {self.deadline_s:g} s (connect, upload and the whole "
            "answer); the connection was dropped, and the export retries later with backoff"
        )

    def _send(self, request: AWSPreparedRequest, remaining: float) -> AWSResponse:
        url = urlsplit(request.url)
        host = (url.hostname or "").lower()
        if host not in self._allowed_hosts:
            allowed = ", ".join(sorted(self._allowed_hosts))
            raise EndpointRefused(f"refusing to send to {host}: only {allowed} may be contacted for this export")
        if url.scheme not in self._manager.pool_classes_by_scheme:
            raise EndpointRefused(f"refusing {url.scheme}:// for {host}: only https:// is allowed")
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        try:
            pool = self._manager.connection_from_url(request.url)
            raw = pool.urlopen(
                method=request.method,
                url=target,
                body=cast(Any, request.body),
                headers=dict(request.headers.items()),
                retries=Retry(False),
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
                chunked=False,
                timeout=Timeout(connect=min(self._connect_timeout, remaining), read=min(self._read_timeout, remaining)),
            )
            # Read the body now, as botocore's own session does for non-streaming operations, but
            # never more than the cap: past it the connection is closed, not drained.
            body = self._read_capped(raw, host)
            response = AWSResponse(request.url, raw.status, cast(Any, raw.headers), cast(Any, _Body(body)))
        except ExportError:
            raise
        except Urllib3SSLError as exc:
            raise SSLError(endpoint_url=request.url, error=exc) from exc
        except (NewConnectionError, socket.gaierror) as exc:
            # NewConnectionError subclasses urllib3's ConnectTimeoutError: it must come first.
            raise EndpointConnectionError(endpoint_url=request.url, error=exc) from exc
        except Urllib3ConnectTimeoutError as exc:
            raise BotoConnectTimeoutError(endpoint_url=request.url, error=exc) from exc
        except Urllib3ReadTimeoutError as exc:
            raise BotoReadTimeoutError(endpoint_url=request.url, error=exc) from exc
        except ProtocolError as exc:
            raise ConnectionClosedError(error=exc, request=request, endpoint_url=request.url) from exc
        except Exception as exc:
            raise HTTPClientError(error=exc) from exc
        return response

    def _read_capped(self, raw: Any, host: str) -> bytes:
        cap = self._max_response_bytes
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            chunk = raw.read(min(8192, cap + 1 - size), decode_content=False)
            if not chunk:
                raw.release_conn()
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raw.close()  # the connection goes, so the rest of the answer is never read
        raw.release_conn()
        if self._truncate_answer:
            return b"".join(chunks)[:cap]
        raise ResponseTooLarge(
            f"{host} answered PutObject (HTTP {raw.status}) with more than {cap // 1024} KB; an S3 answer is a few "
            "hundred bytes, so the connection was dropped and the rest was not read"
        )

    def close(self) -> None:
        self._manager.clear()
