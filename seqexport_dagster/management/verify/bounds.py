"""How much `verify` reads: bounds on objects, their decompressed content, lines and the listing.

A bucket is the customer's and may be hostile or broken: a 1 MB gzip bomb, a 1 GB object, one line
of a gigabyte, a listing of millions of keys or one that never ends. Each bound below turns that
into a clear answer instead of gigabytes of memory or a hang:

- an object larger than ``max_object_bytes`` (as listed, or as it streams) is a ``too_large``
  problem and is never read; what is read is never more than the listing announced;
- content is decompressed and split into lines as a stream, so memory holds one chunk and one
  line, never the whole part; more than ``max_decompressed_bytes`` or a line longer than
  ``max_line_bytes`` makes the part a ``too_large`` problem, and the part stops being read;
- reads in flight hold at most ``in_flight_bytes`` (as listed) besides the part being checked;
- the listing stops with `ListingTooLong` (exit 2, naming ``max_objects``) past ``max_objects``.

The defaults hold a real export's parts (50,000 rows of at most a few KB each) with room to spare,
and keep verify under about 200 MB of memory whatever the bucket holds.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Final

from seqexport_dagster.errors import InvalidInput, ObjectTooLarge

MIB: Final = 1024 * 1024
#: Bytes decompressed per step: what one step may add to memory.
CHUNK: Final = MIB


@dataclass(frozen=True, slots=True)
class Limits:
    max_object_bytes: int = 64 * MIB
    max_decompressed_bytes: int = 1024 * MIB
    max_line_bytes: int = MIB
    max_objects: int = 200_000
    in_flight_bytes: int = 32 * MIB

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f.name, f"{value!r} is not a positive whole number")


DEFAULT_LIMITS: Final = Limits()


def parse_size(field: str, text: str) -> int:
    """``64MiB``, ``1GiB``, ``500k`` or a plain number of bytes (the CLI's size options)."""
    units = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": MIB,
             "g": 10**9, "gb": 10**9, "gib": 1024 * MIB}  # fmt: skip
    cleaned = text.strip().lower().replace("_", "").replace(",", "")
    number = cleaned.rstrip("kmgib")
    unit = cleaned[len(number) :]
    if not number.isdigit() or unit not in units or len(number) > 15:
        raise InvalidInput(field, f"{text[:40]!r} is not a size: give bytes or a number with KB, MB, GB, MiB or GiB")
    value = int(number) * units[unit]
    if value < 1:
        raise InvalidInput(field, "must be at least 1 byte")
    return value


def parse_count(field: str, text: str) -> int:
    cleaned = text.strip().replace("_", "").replace(",", "")
    if not cleaned.isdigit() or len(cleaned) > 15 or int(cleaned) < 1:
        raise InvalidInput(field, f"{text[:40]!r} is not a positive whole number")
    return int(cleaned)


def size_text(n: int) -> str:
    return f"{n / MIB:,.0f} MiB" if n >= MIB and n % MIB == 0 else f"{n:,} bytes"


def gzip_lines(chunks: Iterable[bytes], limits: Limits) -> Iterator[bytes]:
    """The lines of every gzip member of a stream, as any gzip reader reads them, decompressed as
    they are needed. Raises `zlib.error` or `EOFError` (truncated) on bad gzip, and `ObjectTooLarge`
    past ``max_decompressed_bytes`` or on a line longer than ``max_line_bytes``. A last line
    without its newline is still a line; an empty stream has none."""
    splitter = _Lines(limits)
    member = zlib.decompressobj(31)
    started = False  # the current member has had input and has not ended
    for chunk in chunks:
        data = chunk
        while data:
            started = True
            yield from splitter.add(member.decompress(data, CHUNK))
            data = member.unconsumed_tail
            if member.eof:
                data = member.unused_data + data
                member, started = zlib.decompressobj(31), False
    while started:  # all input is in: what the member still holds back, then its end
        out = member.decompress(b"", CHUNK)
        if not out:
            break
        yield from splitter.add(out)
    if started and not member.eof:
        raise EOFError("truncated gzip stream")
    if splitter.pending:
        yield splitter.pending


class _Lines:
    """Decompressed output to lines, counting bytes against the bounds."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.pending = b""

    def add(self, out: bytes) -> list[bytes]:
        if not out:
            return []
        self.total += len(out)
        limit = self.limits.max_decompressed_bytes
        if self.total > limit:
            raise ObjectTooLarge(f"decompresses to more than {size_text(limit)} (--max-decompressed-bytes)")
        lines = (self.pending + out).split(b"\n")
        self.pending = lines.pop()
        longest = max(len(self.pending), *(len(line) for line in lines)) if lines else len(self.pending)
        if longest > self.limits.max_line_bytes:
            raise ObjectTooLarge(f"has a line longer than {size_text(self.limits.max_line_bytes)} (--max-line-bytes)")
        return lines
