"""The remote CLI's connection to the HTTP API: its address, the token, bounded answers, errors as ours.

`remote.RemoteExports` and `remote_webhooks.RemoteWebhooks` each send their requests through one
`ApiClient`; neither knows the other's module. Answers come back as JSON; an HTTP error comes back
as the error class the local API would raise, so the CLI leaves with the same exit code.

The standard library's `http.client`, not httpx: importing httpx (and with it httpcore, and its own
command line's rich, click and pygments) cost the remote CLI a third of its start, and a command
sends a few plain requests (issue 40).
"""

from __future__ import annotations

import ipaddress
import json as _json
import ssl
from collections.abc import Mapping
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from seqexport_dagster.errors import (
    ConfigurationError,
    ConflictError,
    ExportError,
    InvalidInput,
    NotFound,
    RemoteConnectionTestFailed,
    ResponseTooLarge,
    RetryableError,
    sanitize_error,
)

#: Seconds to connect, then to wait for each read of the answer (a create runs a connection test).
CONNECT_TIMEOUT_S: Final = 10.0
READ_TIMEOUT_S: Final = 120.0
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
#: ``call(json=...)`` left out: no body (``None`` is a body, JSON ``null``).
_NO_BODY: Final = object()
#: The largest answer read from the API (a year of 15-minute ledger windows is about 30 MB).
MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024


def _error(status: int, body: bytes) -> ExportError:
    try:
        detail = _json.loads(body)["error"]
        message, field = str(detail["message"]), detail.get("field")
    except (ValueError, KeyError, TypeError):
        message, field = f"the API answered HTTP {status}", None
    if status == 400:
        field = field or "request"
        problem = message[len(field) + 2 :] if message.startswith(f"{field}: ") else message
        return InvalidInput(field, problem)
    if status == 401:
        return ConfigurationError("the API refused SEQEXPORT_API_TOKEN (missing, wrong or revoked)")
    if status == 404:
        return NotFound(message)
    if status == 409:
        return ConflictError(message)
    if status == 422:
        return RemoteConnectionTestFailed(message)
    if status in (429, 502, 503, 504):
        return RetryableError(message)
    return ExportError(message)


def api_url(url: str) -> str:
    """``SEQEXPORT_API_URL`` checked: https, or http only to this machine (the token and a customer's
    secret travel in the request, so never in plain text over a network)."""
    shown = sanitize_error(repr(url), 200)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 -- raises on a port that is not a number
    except ValueError:
        raise InvalidInput("SEQEXPORT_API_URL", f"{shown} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidInput("SEQEXPORT_API_URL", f"{shown} is not an https:// URL such as https://exports.example.com")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            "SEQEXPORT_API_URL", "may not carry a user name or password; the token goes in SEQEXPORT_API_TOKEN"
        )
    if parts.scheme == "http" and not _is_loopback(host):
        raise InvalidInput(
            "SEQEXPORT_API_URL",
            f"{shown} is plain http: the token would cross the network unencrypted; use https:// "
            "(http:// is accepted only for localhost, 127.0.0.0/8 and ::1)",
        )
    return url.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiClient:
    """One request per connection, closed after its answer: a CLI command makes a few calls at
    most, sometimes with a person's confirmation between them, longer than the server keeps an
    idle connection; a fresh one is never a stale one."""

    def __init__(self, url: str, token: str, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = api_url(url)
        self.max_answer_bytes = max_answer_bytes
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._base_path = parts.path.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {token}",
            "User-Agent": "seqexport-cli",
            "Accept": "application/json",
            "Connection": "close",
        }

    def close(self) -> None:
        """Nothing stays open between calls; kept so callers close every API alike."""

    def call(
        self, method: str, path: str, *, params: Mapping[str, object] | None = None, json: object = _NO_BODY
    ) -> Any:
        """The answer's JSON; an error answer raised as our error tree's class for its status.

        Redirects are never followed (the token would go elsewhere) and no proxy variable or
        ``.netrc`` is read: `http.client` knows neither.
        """
        target = self._base_path + path + (f"?{urlencode(params)}" if params else "")
        headers = dict(self._headers)
        body = None
        if json is not _NO_BODY:
            body = _json.dumps(json).encode()
            headers["Content-Type"] = "application/json"
        connection = self._connection()
        try:
            connection.connect()
            if connection.sock is not None:
                connection.sock.settimeout(READ_TIMEOUT_S)
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            status = response.status
            if status in _REDIRECTS:
                raise InvalidInput(
                    "SEQEXPORT_API_URL",
                    f"the API at {self.url} answered HTTP {status} (a redirect), which is never "
                    "followed so the token is not sent elsewhere; set SEQEXPORT_API_URL to the API's own address",
                )
            answer = self._read(response)
        except (OSError, HTTPException) as exc:
            raise RetryableError(f"cannot reach the API at {self.url}: {type(exc).__name__}") from None
        finally:
            connection.close()
        if status >= 400:
            raise _error(status, answer)
        try:
            return _json.loads(answer)
        except ValueError:
            raise RetryableError(f"the API at {self.url} answered HTTP {status} with no JSON") from None

    def _connection(self) -> HTTPConnection:
        if not self._https:
            return HTTPConnection(self._host, self._port, timeout=CONNECT_TIMEOUT_S)
        import certifi  # only for https: its bundle is read from disk

        # Mozilla's CAs, as httpx had them: python.org's macOS builds come with no system CAs. The
        # certificate and the host name are verified.
        context = ssl.create_default_context(cafile=certifi.where())
        return HTTPSConnection(self._host, self._port, timeout=CONNECT_TIMEOUT_S, context=context)

    def _read(self, response: HTTPResponse) -> bytes:
        """The answer's body, refused past ``max_answer_bytes`` (announced or as it streams)."""
        limit = self.max_answer_bytes
        announced = response.getheader("content-length", "") or ""
        if announced.isdigit() and int(announced) > limit:
            raise ResponseTooLarge(
                f"the API at {self.url} announced {int(announced):,} bytes; at most {limit:,} are read"
            )
        chunks: list[bytes] = []
        total = 0
        while chunk := response.read(64 * 1024):
            total += len(chunk)
            if total > limit:
                raise ResponseTooLarge(f"the API at {self.url} sent more than {limit:,} bytes; the answer was dropped")
            chunks.append(chunk)
        return b"".join(chunks)
