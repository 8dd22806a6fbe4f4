"""Azure's names and SAS tokens: what a customer gives for provider ``azure``, checked before anything
is contacted, and a SAS signature kept out of every text.

An Azure export maps onto the same fields as every other (`DestinationConfig`): ``bucket`` is the
container, ``access_key_id`` the storage account's name (not a secret: it is in every blob URL),
``secret_access_key`` the SAS token (a secret: sealed in the control plane, never shown), and
``endpoint`` the account's blob endpoint (``https://<account>.blob.core.windows.net`` unless given,
for a sovereign cloud). So create, move, rotate keys and the HTTP API take Azure unchanged.

The token is checked here for its shape only (what it may do is the store's answer, at the
connection test): it must be able to create blobs (``c``, or ``w`` where a customer insists, which
can also overwrite), be a container or directory SAS (or an account SAS over blob objects), and
carry a signature. No message ever repeats the token or any part of it but its permissions,
resource and expiry, which are not secret.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

from seqexport_dagster.errors import InvalidInput

#: The field a SAS token travels in (the API's, the CLI's secret); messages name it.
SAS_FIELD: Final = "secret_access_key"
#: Azure's public cloud; sovereign clouds (``blob.core.usgovcloudapi.net``, ``blob.core.chinacloudapi.cn``)
#: are given as the endpoint.
BLOB_SUFFIX: Final = "blob.core.windows.net"
MAX_SAS_LENGTH: Final = 2048
#: The Blob service version every request names (Put Blob with If-None-Match and Content-MD5 is
#: older than all of them; a fixed one keeps the answers' shape fixed).
API_VERSION: Final = "2021-08-06"
#: A SAS of the right shape that signs nothing: `config.stand_in_secret` for Azure.
SAS_STAND_IN: Final = "sv=2021-08-06&sr=c&sp=c&se=2099-12-31&sig=stand-in"

_ACCOUNT_RE: Final = re.compile(r"^[a-z0-9]{3,24}\Z")
_CONTAINER_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}\Z")
# The signature in a SAS token or a URL: ``sig=`` up to the next separator.
_SIG_RE: Final = re.compile(r"(?i)(?<![A-Za-z0-9_])(sig=)[^&\s\"'<>]+")
_KNOWN: Final = frozenset(
    {
        "sv",
        "ss",
        "srt",
        "sp",
        "st",
        "se",
        "sip",
        "spr",
        "sr",
        "si",
        "sig",
        "ses",
        "sdd",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "saoid",
        "suoid",
        "scid",
        "skdutid",
        "sduoid",
        "rscc",
        "rscd",
        "rsce",
        "rscl",
        "rsct",
    }  # fmt: skip
)


def account_endpoint(account: str) -> str:
    return f"https://{account}.{BLOB_SUFFIX}"


def validate_account(account: str | None) -> str:
    if not account:
        raise InvalidInput("access_key_id", "is required for azure: give the storage account's name")
    if not _ACCOUNT_RE.match(account):
        raise InvalidInput(
            "access_key_id",
            "is not a storage account name: for azure give the account's name, 3-24 lowercase letters and digits",
        )
    return account


def validate_container(container: str) -> str:
    if not _CONTAINER_RE.match(container):
        raise InvalidInput(
            "bucket",
            f"{container!r} is not a valid Azure container name: use 3-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, with no '--'",
        )
    return container


@dataclass(frozen=True, slots=True)
class Sas:
    """What a SAS token says about itself (nothing here is secret; the signature is not kept)."""

    permissions: str  # "" when a stored access policy gives them
    policy: str | None  # si: the container's stored access policy the token is tied to
    start: str | None
    expiry: str | None
    resource: str | None  # sr: c (container), d (directory); None for an account SAS
    delegation: bool  # a user delegation SAS (signed with an Entra ID key)
    encryption_scope: str | None

    @property
    def may_overwrite(self) -> bool:
        return "w" in self.permissions

    def expired(self, now: dt.datetime) -> bool:
        end = _when(self.expiry)
        return end is not None and end <= now

    def not_yet_valid(self, now: dt.datetime) -> bool:
        begin = _when(self.start)
        return begin is not None and begin > now


def normalize_sas(token: str) -> str:
    """The token as sent in a URL: blanks and a leading ``?`` (as the portal shows it) removed."""
    return token.strip().removeprefix("?")


def parse_sas(token: str | None) -> Sas:
    """Check a SAS token's shape; raise `InvalidInput` naming the field, never echoing the token."""
    if not token or not normalize_sas(token):
        raise InvalidInput(SAS_FIELD, "is required for azure: the SAS token (prompt, stdin or environment variable)")
    text = normalize_sas(token)
    if len(text) > MAX_SAS_LENGTH:
        raise InvalidInput(SAS_FIELD, f"the SAS token is longer than {MAX_SAS_LENGTH} characters; paste the token only")
    if "://" in text or text.lower().startswith(("http", "blobendpoint")):
        raise InvalidInput(
            SAS_FIELD,
            "give the SAS token only (the part after '?', starting sv=), not the SAS URL or a connection string",
        )
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise InvalidInput(SAS_FIELD, "the SAS token contains spaces or control characters; paste it again")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise InvalidInput(SAS_FIELD, "is not a SAS token: expected name=value pairs joined by '&'") from None
    names = [name for name, _ in pairs]
    fields = dict(pairs)
    if len(set(names)) != len(names):
        raise InvalidInput(SAS_FIELD, "the SAS token names a parameter twice; paste it again as Azure gave it")
    unknown = sorted(set(names) - _KNOWN)
    if unknown and all(len(n) <= 8 and n.isalnum() for n in unknown):
        raise InvalidInput(SAS_FIELD, f"the SAS token has parameters Azure does not define: {', '.join(unknown)}")
    if unknown:
        raise InvalidInput(SAS_FIELD, "the SAS token has parameters Azure does not define")
    # A token tied to a stored access policy (si=) may leave its permissions and expiry to the policy.
    required = ("sv", "sig") if fields.get("si") else ("sv", "sp", "se", "sig")
    missing = [n for n in required if not fields.get(n)]
    if missing:
        raise InvalidInput(SAS_FIELD, f"is not a complete SAS token: {', '.join(missing)} missing")
    permissions = fields.get("sp", "")
    if permissions and "c" not in permissions and "w" not in permissions:
        raise InvalidInput(
            SAS_FIELD,
            f"the SAS token's permissions ({permissions!r}) do not allow creating blobs: create a SAS with the "
            "create (c) permission only (see 'Azure Blob Storage' in the customer docs)",
        )
    resource = fields.get("sr")
    if "ss" in fields or "srt" in fields:
        if "b" not in fields.get("ss", "") or "o" not in fields.get("srt", ""):
            raise InvalidInput(
                SAS_FIELD, "this account SAS does not cover blob objects: it needs services b and resource types o"
            )
    elif resource not in ("c", "d"):
        shown = f"sr={resource}" if resource and len(resource) <= 3 else "no sr"
        raise InvalidInput(
            SAS_FIELD,
            f"the SAS token is for one blob or a snapshot ({shown}); create it for the container (sr=c) "
            "so that it can create every part",
        )
    if "se" in fields and _when(fields["se"]) is None:
        raise InvalidInput(SAS_FIELD, "the SAS token's expiry (se) is not a time; paste the token as Azure gave it")
    return Sas(
        permissions=permissions,
        policy=fields.get("si") or None,
        start=fields.get("st"),
        expiry=fields.get("se"),
        resource=resource,
        delegation="skoid" in fields,
        encryption_scope=fields.get("ses") or None,
    )


def _when(text: str | None) -> dt.datetime | None:
    """A SAS time (``2027-01-31``, ``2027-01-31T08:00Z`` or with seconds), in UTC."""
    if not text:
        return None
    for form in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%MZ", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return dt.datetime.strptime(text, form).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    return None


def redact_sas(text: str) -> str:
    """``text`` with every SAS signature (``sig=...``) shown as ``sig=***``."""
    return _SIG_RE.sub(r"\1***", text)


class SasLogFilter(logging.Filter):
    """Scrubs SAS signatures out of urllib3's debug lines, which print each request's URL (and a SAS
    travels in the URL's query). Installed on ``urllib3.connectionpool`` by `AzureDestination`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg, record.args = redact_sas(record.getMessage()), ()
        elif isinstance(record.msg, str):
            record.msg = redact_sas(record.msg)
        return True


SAS_LOG_FILTER: Final = SasLogFilter()
