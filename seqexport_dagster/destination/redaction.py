"""Redaction: whole secrets out of text, option values out of echoed command lines, key ids masked.

A secret is replaced only where it stands as a whole token, never inside a longer word: replacing
every substring garbles messages (a secret ``x`` turned ``acme-exports`` into ``acme-e***ports``) and
shows the reader what the secret contains. A token is bounded by anything but letters, digits,
``+``, ``_`` and ``-``: so ``key=SECRET``, ``https://SECRET.example``, ``/SECRET/`` and a secret at
the end of a sentence are all found, and a secret with ``/`` or ``=`` inside (AWS keys have them)
matches as a whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final

REDACTED: Final = "***"
#: Characters a secret token is made of; a match must not touch one on either side.
_TOKEN_CHARS: Final = r"A-Za-z0-9+_\-"


def _pattern(secret: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_TOKEN_CHARS}]){re.escape(secret)}(?![{_TOKEN_CHARS}])")


def redact_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each whole occurrence of each secret (and of its JSON-escaped form) as ``***``."""
    for secret in secrets:
        if not secret:
            continue
        for form in dict.fromkeys((secret, json.dumps(secret)[1:-1])):
            text = _pattern(form).sub(REDACTED, text)
    return text


def mask_key_id(access_key_id: str | None) -> str | None:
    """``AKIA************MPLE``: enough to tell keys apart, not enough to copy one."""
    if not access_key_id:
        return None
    if len(access_key_id) < 12:
        return "*" * len(access_key_id)
    return access_key_id[:4] + "*" * (len(access_key_id) - 8) + access_key_id[-4:]


def option_names_only(words: Iterable[str]) -> list[str]:
    """The options of an echoed command line without their values: ``--opt=value`` becomes ``--opt``."""
    return [word.split("=", 1)[0] for word in words if word.startswith("-")]
