"""Text that came from outside (object keys, a store's or a server's messages) made safe to print.

A bucket is the customer's, an API answer may come from anywhere: a key like
``"\\x1b[2J\\rALL WINDOWS OK"`` must print as those characters, not clear the screen and forge a
verdict. `escape` writes every character that is not printable (C0 and C1 controls, escape
sequences, CR, line and paragraph separators, bidi overrides and other invisible format
characters) as a Python-style escape, so the text stays recognisable and copyable but inert.
"""

from __future__ import annotations


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: object) -> str:
    """``text`` on one line with each non-printable character (newlines included) escaped."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in value)


def escape_lines(text: str) -> str:
    """`escape` for each line of ``text``: our own newlines stay, everything else is inert."""
    if text.isprintable():
        return text
    return "\n".join(escape(line) for line in text.split("\n"))
