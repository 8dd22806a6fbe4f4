"""Validation of the values a customer or operator gives the API, before anything is changed.

Each validator returns the value or raises `InvalidInput` naming the field and saying what is
accepted. The local API (`api.Exports`) and the remote CLI (`remote.RemoteExports`) apply the same
rules, so a wrong value is refused before anything is saved or sent.
"""

from __future__ import annotations

import re
from typing import Final

from seqexport_dagster.contract.window import MINUTE_MS
from seqexport_dagster.errors import InvalidInput

MAX_LAG_MS: Final = 60 * MINUTE_MS
# \Z, not $: "$" also matches before a trailing newline.
_ACCOUNT_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_EXPORT_ID_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,40}\Z")


#: Names that mean a scope or a role somewhere (logs, idempotency, support tooling), never an account.
RESERVED_ACCOUNTS: Final = frozenset({"operator", "operators", "admin", "root", "system", "sequenzy", "all"})


def validate_account(account_id: str) -> str:
    if not _ACCOUNT_RE.match(account_id or ""):
        raise InvalidInput(
            "account", f"{account_id[:80]!r} is not an account id: use 1-64 letters, digits, '_', '.' or '-'"
        )
    if account_id.lower() in RESERVED_ACCOUNTS:
        raise InvalidInput(
            "account", f"{account_id!r} is a reserved name; choose another account id (reserved: operator, admin, ...)"
        )
    return account_id


def validate_lag_ms(lag_ms: int) -> int:
    if not 0 <= lag_ms <= MAX_LAG_MS:
        raise InvalidInput("lag", f"{lag_ms // MINUTE_MS} minutes is out of range: use 0 to 60 minutes")
    return lag_ms


def validate_export_id(export_id: str) -> str:
    if not _EXPORT_ID_RE.match(export_id or ""):
        raise InvalidInput(
            "export_id",
            f"{export_id[:80]!r} is not an export id: ids look like exp_0123456789abcdef (see `seqexport list`)",
        )
    return export_id
