"""Redaction: whole secrets out of text, option values out of echoed command lines, key ids masked.

A secret is replaced only where it stands as a whole token, never inside a longer word: replacing
every substring garbles messages (a secret ``x`` turned ``acme-exports`` into ``acme-e***ports``) and
shows the reader what the secret contains. A token is bounded by anything but letters, digits,
``+``, ``_`` and ``-``: so ``key=SECRET``, ``https://SECRET.example``, ``/SECRET/`` and a secret at
the end of a sentence are all found, and a secret with ``/`` or ``=`` inside (AWS keys have them)
matches as a whole.

Our own fixed wording is the one place a secret is not replaced (`OUR_PHRASES`): a secret that is
an ordinary word (``testing``) would otherwise turn "testing the connection" into "*** the
connection", which garbles the sentence and, worse, tells every reader what the secret is, since
the sentence is always the same. Inside those exact phrases the word is ours and shows nothing;
everywhere else (values, a store's echo, the same word in any other sentence) it is replaced.
Real keys (40 characters of base64 for AWS and GCS HMAC) never are such a word, so this only
matters for a test or a careless secret, and it can never reveal a secret that is not one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final

REDACTED: Final = "***"
#: Characters a secret token is made of; a match must not touch one on either side.
_TOKEN_CHARS: Final = r"A-Za-z0-9+_\-"


#: Fixed wording of our own messages that is printed around values. A secret found only inside one
#: of these (case-sensitive, as we write them) is our word, not the secret: it is left as it is.
OUR_PHRASES: Final = (
    "testing the connection",
    "connection test passed",
    "writing a test file",
    "writes a test file",
    "wrote a test file",
    "the connection test",
)


def _ours(text: str) -> list[tuple[int, int]]:
    return [m.span() for phrase in OUR_PHRASES for m in re.finditer(re.escape(phrase), text)]


def _pattern(secret: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_TOKEN_CHARS}]){re.escape(secret)}(?![{_TOKEN_CHARS}])")


def redact_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each whole occurrence of each secret (and of its JSON-escaped form) as ``***``."""
    for secret in secrets:
        if not secret:
            continue
        for form in dict.fromkeys((secret, json.dumps(secret)[1:-1])):
            ours = _ours(text)

            def replace(match: re.Match[str], ours: list[tuple[int, int]] = ours) -> str:
                inside = any(lo <= match.start() and match.end() <= hi for lo, hi in ours)
                return match.group(0) if inside else REDACTED

            text = _pattern(form).sub(replace, text)
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
