"""The remote CLI's connection to the HTTP API: its address, the token, bounded answers, errors as ours.

`remote.RemoteExports` and `remote_webhooks.RemoteWebhooks` each send their requests through one
`ApiClient`; neither knows the other's module. Answers come back as JSON; an HTTP error comes back
as the error class the local API would raise, so the CLI leaves with the same exit code.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

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

#: The largest answer read from the API (a year of 15-minute ledger windows is about 30 MB).
MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024


def _error(response: httpx.Response, body: bytes) -> ExportError:
    try:
        detail = json.loads(body)["error"]
        message, field = str(detail["message"]), detail.get("field")
    except (ValueError, KeyError, TypeError):
        message, field = f"the API answered HTTP {response.status_code}", None
    status = response.status_code
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
    def __init__(
        self,
        url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        # trust_env=False: proxy variables and .netrc must not redirect (or see) the token.
        # follow_redirects=False: a redirect is an error (`call`), so the token goes nowhere else.
        self.url = api_url(url)
        self.max_answer_bytes = max_answer_bytes
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "seqexport-cli"},
            timeout=httpx.Timeout(120.0, connect=10.0),
            trust_env=False,
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer's JSON; an error answer raised as our error tree's class for its status."""
        try:
            with self.http.stream(method, path, **kwargs) as response:
                if response.is_redirect:
                    raise InvalidInput(
                        "SEQEXPORT_API_URL",
                        f"the API at {self.url} answered HTTP {response.status_code} (a redirect), which is never "
                        "followed so the token is not sent elsewhere; set SEQEXPORT_API_URL to the API's own address",
                    )
                body = self._read(response)
        except httpx.HTTPError as exc:
            raise RetryableError(f"cannot reach the API at {self.url}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise _error(response, body)
        try:
            return json.loads(body)
        except ValueError:
            raise RetryableError(f"the API at {self.url} answered HTTP {response.status_code} with no JSON") from None

    def _read(self, response: httpx.Response) -> bytes:
        """The answer's body, refused past ``max_answer_bytes`` (announced or as it streams)."""
        limit = self.max_answer_bytes
        announced = response.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > limit:
            raise ResponseTooLarge(
                f"the API at {self.url} announced {int(announced):,} bytes; at most {limit:,} are read"
            )
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > limit:
                raise ResponseTooLarge(f"the API at {self.url} sent more than {limit:,} bytes; the answer was dropped")
            chunks.append(chunk)
        return b"".join(chunks)
