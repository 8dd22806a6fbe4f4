"""Rows to gzip JSONL parts of at most 50,000 lines.

Chosen by benchmark (DESIGN §9, ``benchmarks/``): msgspec encodes a batch of Structs to JSON lines in
one C call (``encode_lines``), and python-isal's deflate at level 1 compresses about 10× faster than
zlib's default at a similar ratio. Output is a single standard gzip member per part with mtime 0, and
isal is fed the JSON lines in fixed slices (`Deflater`), so the same rows always give byte-identical
parts, however the source batched them.

Each part also carries what the part ledger records before its PUT (runner.py): the ids it holds and
its boundary, the sort key of its last row, from which a retry continues without rewriting it.

Memory is bounded by one compressed part plus one source batch, whatever the window's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from isal import isal_zlib

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.delivery.values import RowChecker
from seqexport_dagster.destination.base import content_md5
from seqexport_dagster.errors import InvalidInput

#: At most this many lines (rows) per part, so a part stays a few MB whatever the window holds.
PART_LIMIT: Final = 50_000
GZIP_WBITS: Final = 31  # zlib convention for "gzip container"
DEFAULT_LEVEL: Final = 1
#: Bytes of JSON lines per call into isal (the last call of a part takes what is left).
DEFLATE_SLICE: Final = 64 * 1024


def _gzip(data: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    comp = isal_zlib.compressobj(level, isal_zlib.DEFLATED, GZIP_WBITS)
    return comp.compress(data) + comp.flush()


#: What a part number is overwritten with when an operator replaces a window with fewer parts
#: (``replace``, the one mode that overwrites): a valid, empty gzip file (we may not delete).
EMPTY_GZIP: Final = _gzip(b"")

#: A row's place in the order parts are cut in: ``(recorded_at, id)`` for events, ``(id,)`` for
#: the snapshot.
SortKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Part:
    number: int
    body: bytes
    rows: int
    ids: tuple[str, ...] = ()
    #: The sort key of the part's last row; ``None`` for an empty part.
    last: SortKey | None = None

    @property
    def size(self) -> int:
        return len(self.body)

    @property
    def content_md5(self) -> str:
        """What the part ledger records before the PUT: the same ``Content-MD5`` the destination sends."""
        return content_md5(self.body)


def pack_ids(ids: Iterable[str]) -> bytes:
    """The ledger's form of a part's ids: newline-joined, deflated (ids never contain a newline)."""
    return isal_zlib.compress("\n".join(ids).encode(), 1)


def unpack_ids(blob: bytes) -> list[str]:
    text = isal_zlib.decompress(blob).decode()
    return text.split("\n") if text else []


#: Characters that JSON leaves unescaped inside strings but that many line readers take for a line
#: break (Python's ``str.splitlines``, JavaScript before ES2019): NEL, LINE SEPARATOR, PARAGRAPH
#: SEPARATOR. Escaped in every line, so a value can never split a row for any reader (issue 39: the
#: simulator's loader split a part at a U+2028 inside a custom event's properties).
_LINE_BREAKS: Final = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def one_line_each(lines: bytes) -> bytes:
    """JSON lines with every unicode line break inside a string escaped (lossless: the UTF-8 bytes of
    these characters occur only inside strings, and ``\\uXXXX`` is the same character to a parser)."""
    # One-byte searches first (memchr, ~20 GB/s): every encoding of the three starts with \xc2 or
    # \xe2, and most batches hold neither byte (ASCII, accents are \xc3, emoji \xf0). The two-byte
    # searches run at ~1 GB/s: alone they cost ~0.7 CPU-s per million email events (issue 46).
    if b"\xe2" not in lines and b"\xc2" not in lines:
        return lines
    if b"\xc2\x85" not in lines and b"\xe2\x80" not in lines:
        return lines
    for raw, escaped in _LINE_BREAKS:
        lines = lines.replace(raw, escaped)
    return lines


def _row_builder(ds: Dataset) -> Callable[[Sequence[Any]], list[Any]]:
    """Turn checked rows (`values.RowChecker`) into msgspec Structs; JSON fields, already re-encoded
    as one compact JSON value each, are embedded as `Raw`."""
    struct = msgspec.defstruct(ds.name, [(name, Any) for name in ds.field_names])
    raw_positions = [i for i, f in enumerate(ds.fields) if f.type in ("object", "array")]
    raw = msgspec.Raw

    if not raw_positions:

        def build(batch: Sequence[Any]) -> list[Any]:
            return [struct(*row) for row in batch]

        return build

    def build_with_raw(batch: Sequence[Any]) -> list[Any]:
        out = []
        for row in batch:
            values = list(row)
            for i in raw_positions:
                value = values[i]
                if value is not None:
                    values[i] = raw(value.encode() if isinstance(value, str) else value)
            out.append(struct(*values))
        return out

    return build_with_raw


class Deflater:
    """One gzip member from a stream of bytes, fed to isal in slices of `DEFLATE_SLICE` bytes whatever
    pieces the bytes come in.

    isal's output depends on how its input is split across ``compress`` calls (29 of 300 random splits
    of the same JSON lines gave other bytes). A part of unknown outcome is cut again from other source
    batches (late rows in between, another starting row) and re-sent under its name; on a store
    without preconditions other bytes would replace the object (a simulator run under load: seed 3,
    a ``custom_events`` part on a ``nopre`` bucket). With fixed slices the bytes depend on the rows
    alone. Only the part of a slice that straddles two pieces is copied.
    """

    def __init__(self, level: int = DEFAULT_LEVEL) -> None:
        self._comp = isal_zlib.compressobj(level, isal_zlib.DEFLATED, GZIP_WBITS)
        self._tail = bytearray()
        self._out: list[bytes] = []

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        start, end = 0, len(data)
        if self._tail:
            start = min(end, DEFLATE_SLICE - len(self._tail))
            self._tail += view[:start]
            if len(self._tail) < DEFLATE_SLICE:
                return
            self._out.append(self._comp.compress(self._tail))
            self._tail.clear()
        while end - start >= DEFLATE_SLICE:
            self._out.append(self._comp.compress(view[start : start + DEFLATE_SLICE]))
            start += DEFLATE_SLICE
        self._tail += view[start:end]

    def finish(self) -> bytes:
        """The gzip member; the deflater is spent."""
        if self._tail:
            self._out.append(self._comp.compress(self._tail))
        self._out.append(self._comp.flush())
        body = b"".join(self._out)
        self._out, self._tail = [], bytearray()
        return body


class PartWriter:
    """Splits a stream of row batches into gzip JSONL parts.

    ``part_limit`` may be lowered (tests use small parts), never raised above the contract's 50,000.
    """

    def __init__(self, ds: Dataset, part_limit: int = PART_LIMIT, level: int = DEFAULT_LEVEL) -> None:
        if not 1 <= part_limit <= PART_LIMIT:
            raise InvalidInput("part_limit", f"{part_limit} is outside 1..{PART_LIMIT}")
        self.dataset = ds
        self.part_limit = part_limit
        self.level = level
        self._check = RowChecker(ds)
        self._build = _row_builder(ds)
        names = ds.field_names
        self._id_at = names.index("id")
        key_at = [names.index(name) for name in ds.order_by]
        self._key: Callable[[Sequence[Any]], SortKey] = lambda row: tuple(row[i] for i in key_at)
        self._encode_lines = msgspec.json.Encoder().encode_lines

    def parts(self, batches: Iterable[Sequence[Any]], *, first: int = 0, empty: bool = True) -> Iterator[Part]:
        """Yield parts numbered from ``first``.

        With ``empty`` an input without rows still yields one empty part (a window's part 0000
        shows that the window has no rows); without it, no rows yield no part.
        """
        number = first
        rows_in_part = 0
        deflater = Deflater(self.level)
        ids: list[str] = []
        id_at = self._id_at
        last: SortKey | None = None
        for batch in map(self._check, batches):
            start = 0
            while start < len(batch):
                take = min(len(batch) - start, self.part_limit - rows_in_part)
                piece = batch[start : start + take] if (start or take < len(batch)) else batch
                deflater.write(one_line_each(self._encode_lines(self._build(piece))))
                ids.extend([row[id_at] for row in piece])
                last = self._key(piece[-1])
                rows_in_part += take
                start += take
                if rows_in_part == self.part_limit:
                    yield Part(number, deflater.finish(), rows_in_part, tuple(ids), last)
                    number += 1
                    rows_in_part = 0
                    ids = []
                    deflater = Deflater(self.level)
        if rows_in_part or (empty and number == first):
            yield Part(number, deflater.finish(), rows_in_part, tuple(ids), last if rows_in_part else None)
