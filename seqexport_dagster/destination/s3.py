"""The S3 family (AWS S3, GCS through HMAC keys, R2 / B2 / MinIO) behind one `Destination`.

This module is the one boundary where botocore and urllib3 exceptions become our error tree; nothing
above it sees a botocore type.

What the client is allowed to do, and why:

* Only ``PutObject`` ever reaches the wire. A ``before-send`` handler refuses every other
  operation, so neither a botocore customization (region redirects call ``HeadBucket``) nor a future
  change here can quietly need more than the ``s3:PutObject`` grant customers give us.
* The handler also does the sending, through urllib3 pools whose sockets go through `ConnectGuard`
  (resolve once, refuse non-public answers, connect to the checked IP). Proxies are never consulted,
  and a request for any host other than the endpoint (or ``<bucket>.<endpoint>`` on AWS) is refused,
  so no redirect can move an upload elsewhere.
* botocore runs from a session that reads no environment variable and no ``~/.aws`` file (not even
  ``~/.aws/models``): the worker's own credentials, profile, endpoint overrides, checksum settings or
  service models can never leak in. Such a session holds nothing per export, so one per process is
  shared (`_shared_session`); each destination's client still gets its own credentials, event
  handlers and connection pools.
* Every create carries the provider's create-only precondition where it has one (`Profile`):
  ``If-None-Match: *`` on AWS, R2, MinIO and other S3-compatible stores, and GCS's XML-API
  equivalent ``x-goog-if-generation-match: 0`` (a ``before-sign`` handler rewrites the header, so
  the signature covers it). A 412 is `PutOutcome.EXISTED`: an earlier attempt (or botocore's own
  retry after a lost answer) landed it. A store that answers 501 to the header is remembered as
  one without preconditions, and the write goes plain.
* Every request is bounded, because the endpoint is the customer's and may be hostile: one deadline
  per ``put`` covers name lookup, connect, TLS, sending and the whole answer across botocore's retries
  (`_Watch` shuts the socket down when it passes, so an answer dripped a byte a second cannot keep
  it open), and at most `MAX_RESPONSE_BYTES` of an answer are read (an S3 answer is a few hundred
  bytes; past the cap the connection is dropped, so a 400 MB answer costs 16 KB of memory).
* Bodies are sent as-is with an explicit ``Content-MD5``; flexible checksums are only calculated
  "when required", which ``PutObject`` is not, so there is no aws-chunked framing and no
  ``x-amz-checksum-*`` header or trailer that GCS, B2 or older MinIO would reject.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import urlsplit

import botocore.session
from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
    AWSPreparedRequest,
    AWSResponse,
)
from botocore.client import BaseClient
from botocore.config import Config
from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES, ConfigValueStore, ConstantProvider
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    SSLError,
)
from botocore.exceptions import ConnectTimeoutError as BotoConnectTimeoutError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError
from botocore.httpsession import get_cert_path
from botocore.loaders import Loader
from urllib3 import PoolManager, Timeout
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError as Urllib3ConnectTimeoutError
from urllib3.exceptions import NameResolutionError, NewConnectionError, ProtocolError
from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeoutError
from urllib3.exceptions import SSLError as Urllib3SSLError
from urllib3.util.retry import Retry

from seqexport_dagster.destination.base import DestinationConfig, OperatorPolicy, PutOutcome, validate_config
from seqexport_dagster.destination.endpoint import (
    ConnectGuard,
    Connector,
    Resolver,
    socket_connector,
    system_resolver,
)
from seqexport_dagster.errors import (
    AccessDenied,
    BadCredentials,
    ClockSkew,
    DestinationError,
    EndpointRefused,
    EndpointTooSlow,
    EndpointUnreachable,
    ExportError,
    InvalidInput,
    NoSuchBucket,
    ResponseTooLarge,
    RetryableError,
)

GCS_ENDPOINT: Final = "https://storage.googleapis.com"
#: Read at most this much of any answer. PutObject answers with an empty body, errors with about
#: 300-2,000 bytes of XML (GCS's longest, with its string-to-sign); anything past this is not S3.
MAX_RESPONSE_BYTES: Final = 16 * 1024
#: Default wall-clock limit of one ``put`` (all attempts): connect, TLS, upload and the whole answer.
#: A 50,000-line part is about 5 MB, so this still allows a 50 KB/s uplink.
DEFAULT_PUT_DEADLINE_S: Final = 120.0

_RETRYABLE_CODES: Final = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "OperationAborted",
        "BadDigest",  # the body changed in transit; sending it again is the cure
        "ConditionalRequestConflict",  # a concurrent conditional write; AWS says retry
        "500",
        "502",
        "503",
        "504",
    }
)
_ACCESS_CODES: Final = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "403", "Forbidden"})
_REDIRECT_CODES: Final = frozenset({"PermanentRedirect", "TemporaryRedirect", "301", "302", "307"})


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
        return Profile("gcs", config.endpoint or GCS_ENDPOINT, config.region or "auto", "path", GCS_GENERATION_MATCH)
    if config.endpoint:
        region = config.region or ("auto" if config.endpoint.endswith(".r2.cloudflarestorage.com") else "us-east-1")
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

    def create_client(self, max_attempts: int, **kwargs: Any) -> BaseClient:
        with self._lock:
            if self._loader is None:
                self._loader = Loader(extra_search_paths=[Loader.BUILTIN_DATA_PATH], include_default_search_paths=False)
            session = self._sessions.get(max_attempts)
            if session is None:
                session = self._sessions[max_attempts] = _isolated_session(max_attempts, self._loader)
            return session.create_client("s3", **kwargs)


# Keyed by process id: a forked child starts its own cache rather than inherit a lock that another
# thread of the parent may have held at the fork.
_session_caches: Final[dict[int, _SessionCache]] = {}


def _shared_session() -> _SessionCache:
    pid = os.getpid()
    cache = _session_caches.get(pid)
    return cache if cache is not None else _session_caches.setdefault(pid, _SessionCache())


def _conn_timeout(value: object) -> float | None:
    # urllib3 uses a sentinel object for "the socket module's default"; that means blocking (None).
    return float(value) if isinstance(value, int | float) else None


class _Watch:
    """Ends one request at its deadline, in whatever phase it is (connect, TLS, upload, answer).

    Per-read timeouts cannot do this: a store that sends one byte a second never lets a read time
    out. So when the deadline passes, `_watchdog` shuts the request's sockets down; the blocked read
    or write then fails at once, and `PinnedSender` reports `EndpointTooSlow`. The sockets are the
    ones the pinned connections open or reuse while the watch is current on this thread.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + max(seconds, 0.0)
        self.expired = False
        self.done = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._connections: list[Any] = []

    def __enter__(self) -> _Watch:
        _current.watch = self
        _watchdog.arm(self)
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self.done = True  # the watchdog drops it lazily; its sockets are no longer ours to shut
        _current.watch = None

    def add_socket(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shutdown(sock)

    def add_connection(self, conn: Any) -> None:
        with self._lock:
            self._connections.append(conn)
            if self.expired:
                _shutdown(getattr(conn, "sock", None))

    def fire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.expired = True
            for sock in [*self._sockets, *(getattr(c, "sock", None) for c in self._connections)]:
                _shutdown(sock)


class _Watchdog:
    """One thread per process fires every `_Watch` whose deadline has passed.

    Cheaper than a timer thread per request (a thread start costs about 1.5 ms, a PUT on a fast
    network a few). Finished watches stay queued until their deadline or the next compaction.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._pid = 0

    def arm(self, watch: _Watch) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: the parent's thread is not here
                self._pid = os.getpid()
                self._queue = []
                threading.Thread(target=self._run, name="seqexport-put-deadlines", daemon=True).start()
            if len(self._queue) > 4096:
                self._queue = [entry for entry in self._queue if not entry[2].done]
                heapq.heapify(self._queue)
            heapq.heappush(self._queue, (watch.at, next(self._order), watch))
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._queue and (self._queue[0][2].done or self._queue[0][0] <= now):
                    _, _, watch = heapq.heappop(self._queue)
                    watch.fire()
                self._cond.wait(self._queue[0][0] - now if self._queue else None)


_watchdog = _Watchdog()
_current = threading.local()


def _watching() -> _Watch | None:
    watch: _Watch | None = getattr(_current, "watch", None)
    return watch


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        # The plain socket's shutdown even for TLS: SSLSocket.shutdown would also drop its SSL
        # object under the reading thread's feet.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def bounded_resolver(resolver: Resolver) -> Resolver:
    """``resolver`` within the current request's deadline.

    A name lookup cannot be interrupted like a socket, and the customer's DNS may answer slowly on
    purpose. So under a `_Watch` the lookup runs on a helper thread and the request stops waiting
    for it when the deadline passes (the thread ends when the system resolver gives up). Only new
    connections look names up; a reused connection costs nothing here.
    """

    def resolve(host: str, port: int) -> Sequence[str]:
        watch = _watching()
        if watch is None:
            return resolver(host, port)
        result: list[Sequence[str]] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def lookup() -> None:
            try:
                result.append(resolver(host, port))
            except BaseException as exc:  # handed to the waiting thread as is
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=lookup, name="seqexport-resolve", daemon=True).start()
        if not done.wait(max(watch.at - time.monotonic(), 0.0)):
            watch.fire()
            raise TimeoutError(f"looking up {host} did not finish within the request's deadline")
        if failure:
            raise failure[0]
        return result[0]

    return resolve


def _pinned_new_conn(conn: Any, guard: ConnectGuard) -> socket.socket:
    """The body of urllib3's ``HTTPConnection._new_conn``, with the guard in place of DNS."""
    sock = _guarded_connect(conn, guard)
    watch = _watching()
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
    watch = _watching()
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
    ) -> None:
        self._allowed_hosts = allowed_hosts
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self.deadline_s = deadline_s
        self._max_response_bytes = max_response_bytes
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

    def budget(self) -> _Budget:
        """One deadline for everything sent inside the ``with`` (all attempts of one put)."""
        return _Budget(self._budget, time.monotonic() + self.deadline_s)

    def send(self, request: AWSPreparedRequest) -> AWSResponse:
        until: float | None = getattr(self._budget, "until", None)
        remaining = (until if until is not None else time.monotonic() + self.deadline_s) - time.monotonic()
        host = (urlsplit(request.url).hostname or "").lower()
        if remaining <= 0:
            raise self._too_slow(host)
        with _Watch(remaining) as watch:
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
        raise ResponseTooLarge(
            f"{host} answered PutObject (HTTP {raw.status}) with more than {cap // 1024} KB; an S3 answer is a few "
            "hundred bytes, so the connection was dropped and the rest was not read"
        )

    def close(self) -> None:
        self._manager.clear()


class _Budget:
    """Sets (and clears) the put deadline on the sending thread."""

    def __init__(self, slot: threading.local, until: float) -> None:
        self._slot = slot
        self._until = until

    def __enter__(self) -> None:
        self._slot.until = self._until

    def __exit__(self, *_: object) -> None:
        self._slot.until = None


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
    ) -> None:
        if config.provider not in ("s3", "gcs"):
            raise InvalidInput("provider", f"{config.provider!r} is not an S3-family provider (s3, gcs)")
        # Empty credentials would make botocore fall back to the worker's own; refuse first.
        if not config.access_key_id:
            raise InvalidInput("access_key_id", "is required")
        if not config.secret_access_key:
            raise InvalidInput("secret_access_key", "is required (prompt, stdin or environment variable)")
        # Re-validated here as well as at save time: whatever path built this config, no unchecked
        # endpoint, bucket or prefix reaches botocore.
        self.config = validate_config(config, policy)
        self.profile = profile_for(self.config)
        self._access_key_id = config.access_key_id
        self._secret = config.secret_access_key
        self._client = self._make_client(max_attempts, connect_timeout, read_timeout)
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
        self._client.meta.events.register("before-call.s3", _disable_region_redirect)
        if self.profile.precondition == GCS_GENERATION_MATCH:
            self._client.meta.events.register("before-sign.s3.PutObject", _gcs_generation_match)
        send: Callable[..., Any] = self._send
        self._client.meta.events.register("before-send.s3", send)

    def _make_client(self, max_attempts: int, connect_timeout: float, read_timeout: float) -> BaseClient:
        client_config = Config(
            region_name=self.profile.region,
            signature_version="s3v4",
            s3=cast(
                Any,
                {
                    "addressing_style": self.profile.addressing_style,
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
            region_name=self.profile.region,
            endpoint_url=self.profile.endpoint_url,
            aws_access_key_id=self._access_key_id,
            aws_secret_access_key=self._secret,
            aws_session_token=None,
            verify=True,
            config=client_config,
        )

    def _send(self, request: AWSPreparedRequest, event_name: str = "", **_: object) -> AWSResponse:
        if not event_name.endswith(".PutObject"):
            operation = event_name.rsplit(".", 1)[-1] or "an unknown operation"
            raise DestinationError(f"refusing to send {operation}: this exporter only ever uses PutObject")
        self._sends += 1
        return self._sender.send(request)

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        prefix = self.config.prefix
        if not key or (prefix and not key.startswith(prefix + "/")):
            raise InvalidInput("key", f"{key!r} is not below the export prefix {prefix!r}")
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode("ascii")
        conditional = create_only and self.preconditions
        extra: dict[str, str] = {"IfNoneMatch": "*"} if conditional else {}
        self._sends = 0
        try:
            with self._sender.budget():
                self._client.put_object(  # type: ignore[attr-defined]
                    Bucket=self.config.bucket,
                    Key=key,
                    Body=body,
                    ContentMD5=md5,
                    ContentType=_content_type(key),
                    **extra,
                )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if conditional and (status == 412 or code == "PreconditionFailed"):
                return PutOutcome.EXISTED
            if conditional and (status == 501 or code == "NotImplemented"):
                self.preconditions = False  # this store has no create-only precondition
                return self.put(key, body, create_only=create_only)
            error = self._translate(exc, key)
            if isinstance(error, AccessDenied):
                # botocore sent it more than once: an earlier send may have landed the object, and a
                # key that may not overwrite is then refused. runner.py probes before believing it.
                error.outcome_unknown = self._sends > 1
            raise error from None
        except Exception as exc:
            raise self._translate(exc, key) from None
        return PutOutcome.CREATED

    def describe(self) -> str:
        return self.config.describe()

    def close(self) -> None:
        self._sender.close()
        self._client.close()

    def _where(self) -> str:
        return self.profile.endpoint_url or f"Amazon S3 ({self.profile.region})"

    def _clean(self, text: str) -> str:
        # A store cannot echo the secret (it is never sent), but an odd one may echo anything it got;
        # keep the guarantee here rather than trusting every server.
        return text.replace(self._secret, "***") if self._secret else text

    def _translate(self, exc: Exception, key: str) -> ExportError:
        if isinstance(exc, ExportError):
            return exc
        inner = exc.kwargs.get("error") if isinstance(exc, HTTPClientError) else None
        if isinstance(inner, ExportError):
            return inner
        if isinstance(exc, ClientError):
            return self._translate_client_error(exc, key)
        if isinstance(exc, EndpointConnectionError | BotoConnectTimeoutError):
            reason = self._clean(str(exc.kwargs.get("error", exc)))
            return EndpointUnreachable(f"cannot reach {self._where()}: {reason}")
        if isinstance(exc, BotoReadTimeoutError | ConnectionClosedError):
            return RetryableError(f"connection to {self._where()} was interrupted: {self._clean(str(exc))}")
        if isinstance(exc, SSLError):
            return DestinationError(f"TLS with {self._where()} failed: {self._clean(str(exc))}")
        if isinstance(exc, HTTPClientError):
            return RetryableError(f"HTTP error talking to {self._where()}: {self._clean(str(exc))}")
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return BadCredentials("the access key id and secret are both required")
        if isinstance(exc, ParamValidationError):
            return InvalidInput("key", self._clean(str(exc)))
        if isinstance(exc, BotoCoreError):
            return DestinationError(f"{self._where()}: {self._clean(str(exc))}")
        return DestinationError(f"unexpected error writing {key}: {type(exc).__name__}: {self._clean(str(exc))}")

    def _translate_client_error(self, exc: ClientError, key: str) -> ExportError:
        error: dict[str, Any] = cast(dict[str, Any], exc.response.get("Error", {}))
        code = str(error.get("Code", ""))
        message = self._clean(str(error.get("Message", "") or ""))
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0) or 0)
        bucket, prefix = self.config.bucket, self.config.prefix
        scope = f"{bucket}/{prefix}/*" if prefix else f"{bucket}/*"
        if code == "NoSuchBucket" or (status == 404 and code in ("", "404")):
            return NoSuchBucket(f"bucket {bucket} does not exist at {self._where()} (or is not visible to this key)")
        if code == "InvalidAccessKeyId":
            return BadCredentials(f"access key {self._access_key_id} is not known to {self._where()}")
        if code == "SignatureDoesNotMatch":
            return BadCredentials(f"bad signature: the secret does not match the access key {self._access_key_id}")
        if code == "RequestTimeTooSkewed":
            return ClockSkew(
                "the store refused our request time: this worker's clock is off by more than 15 minutes; "
                "fix the clock (NTP), the export will then resume"
            )
        if code in _ACCESS_CODES:
            return AccessDenied(
                f"access denied for s3:PutObject on {bucket}/{key}: the policy of access key "
                f"{self._access_key_id} must allow s3:PutObject on {scope}"
                + (f" ({message})" if message and message != "Access Denied" else "")
            )
        if code == "AuthorizationHeaderMalformed" and error.get("Region"):
            return DestinationError(
                f"bucket {bucket} is in region {error['Region']}, not {self.profile.region}; change the export's region"
            )
        if code in _REDIRECT_CODES or 300 <= status < 400:
            headers = meta.get("HTTPHeaders", {})
            region = headers.get("x-amz-bucket-region") or error.get("Region")
            hint = (
                f"bucket {bucket} is in region {region}, not {self.profile.region}; change the export's region"
                if region
                else "check the bucket's region and endpoint"
            )
            return DestinationError(f"{self._where()} answered with a redirect, which is never followed: {hint}")
        if code in _RETRYABLE_CODES or status >= 500 or status == 429:
            return RetryableError(
                f"{self._where()} is busy or failing ({code or status}): {message or 'try again later'}"
            )
        return DestinationError(
            f"{self._where()} refused PutObject of {bucket}/{key}: {code or status}"
            + (f": {message}" if message else "")
        )


def _disable_region_redirect(context: dict[str, Any] | None = None, **_: object) -> None:
    """Switch off botocore's S3 region redirector for this call.

    It would retry against another region's host and may call ``HeadBucket`` to find the region,
    which the customer's policy does not grant. We report the right region instead. The redirector
    skips requests it believes it already redirected; this marks every request so.
    """
    if context is not None and isinstance(context.get("s3_redirect"), dict):
        context["s3_redirect"]["redirected"] = True


def _gcs_generation_match(request: AWSPreparedRequest | Any, **_: object) -> None:
    """GCS's XML API spells "create only" ``x-goog-if-generation-match: 0`` (generation 0: no live
    object). Rewritten before signing, so the SigV4 signature covers the header we send."""
    headers = request.headers
    if headers.get(IF_NONE_MATCH) == "*":
        del headers[IF_NONE_MATCH]
        headers[GCS_GENERATION_MATCH] = "0"


def _content_type(key: str) -> str:
    if key.endswith(".gz"):
        return "application/gzip"
    if key.endswith(".txt"):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"
