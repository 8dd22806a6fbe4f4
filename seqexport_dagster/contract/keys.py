"""Object keys: where each part, ``_SUCCESS`` and the connection test file live in the bucket.

Keys are a pure function of (prefix, dataset, window, part number), so a retry always finds the
names it wrote, and `parse_key` reads them back (``verify``). The layout is the bucket contract:

- event parts: ``<prefix>/<dataset>/date=YYYY-MM-DD/<dataset>-<fromMs>-<toMs>-NNNN.jsonl.gz``;
- snapshot parts: ``<prefix>/subscribers/date=YYYY-MM-DD/subscribers-NNNN.jsonl.gz``, then ``_SUCCESS``;
- an export in the ``parquet`` format names its parts the same way with ``.parquet`` (`file_format`);
- the connection test file: ``<prefix>/_sequenzy/connection-test-<token>.txt``, outside every
  dataset folder;
- window manifests: ``<prefix>/_sequenzy/manifests/<dataset>/date=YYYY-MM-DD/<dataset>-<fromMs>-<toMs>-through-NNNN.json``,
  named by the last part they list, so a manifest written after late parts has a new name.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, FileFormat, extension, parse_format
from seqexport_dagster.contract.schema import SUBSCRIBERS
from seqexport_dagster.contract.window import Window, date_key

#: The one snapshot dataset; its objects are named by day, not by window.
SNAPSHOT_DATASET: Final = SUBSCRIBERS.name
SUCCESS_NAME: Final = "_SUCCESS"
CONTROL_FOLDER: Final = "_sequenzy"


def _join(prefix: str, *parts: str) -> str:
    return "/".join(p for p in (prefix, *parts) if p)


def part_name(dataset: str, window: Window, part: int, fmt: FileFormat = DEFAULT_FORMAT) -> str:
    return f"{dataset}-{window.from_ms}-{window.to_ms}-{part:04d}{extension(fmt)}"


def part_key(prefix: str, dataset: str, window: Window, part: int, fmt: FileFormat = DEFAULT_FORMAT) -> str:
    """``<prefix>/<dataset>/date=YYYY-MM-DD/<dataset>-<fromMs>-<toMs>-NNNN.jsonl.gz`` (or ``.parquet``)."""
    return _join(prefix, dataset, f"date={window.date_key}", part_name(dataset, window, part, fmt))


def snapshot_part_key(prefix: str, day: dt.date, part: int, fmt: FileFormat = DEFAULT_FORMAT) -> str:
    name = f"{SNAPSHOT_DATASET}-{part:04d}{extension(fmt)}"
    return _join(prefix, SNAPSHOT_DATASET, f"date={date_key(day)}", name)


def success_key(prefix: str, day: dt.date) -> str:
    return _join(prefix, SNAPSHOT_DATASET, f"date={date_key(day)}", SUCCESS_NAME)


def connection_test_key(prefix: str, token: str) -> str:
    """Outside every dataset folder, so a loader globbing ``<dataset>/`` never sees it."""
    return _join(prefix, CONTROL_FOLDER, f"connection-test-{token}.txt")


MANIFEST_FOLDER: Final = f"{CONTROL_FOLDER}/manifests"
#: The ``format`` field of every manifest (`seqexport_dagster.delivery.manifest`). ``/2`` added
#: ``continues`` and left continuing windows out of ``chain_from_ms`` (issue 47); ``/1`` is still read.
MANIFEST_FORMAT: Final = "sequenzy-manifest/2"
MANIFEST_FORMAT_V1: Final = "sequenzy-manifest/1"


def manifest_key(prefix: str, dataset: str, window: Window, last_part: int) -> str:
    """Outside every dataset folder (warehouse globs never see it); one name per set of parts."""
    name = f"{dataset}-{window.from_ms}-{window.to_ms}-through-{last_part:04d}.json"
    return _join(prefix, MANIFEST_FOLDER, dataset, f"date={window.date_key}", name)


_MANIFEST_RE = re.compile(
    r"^_sequenzy/manifests/(?P<dataset>[a-z_]+)/date=(?P<date>\d{4}-\d{2}-\d{2})/"
    r"(?P=dataset)-(?P<from_ms>\d+)-(?P<to_ms>\d+)-through-(?P<part>\d{4}|[1-9]\d{4,})\.json$"
)


def parse_manifest_key(relative_key: str) -> tuple[str, Window, int] | None:
    """``(dataset, window, last part)`` of a manifest key below the prefix, or None."""
    found = _MANIFEST_RE.match(relative_key)
    if not found:
        return None
    try:
        window = Window(int(found.group("from_ms")), int(found.group("to_ms")))
    except ValueError:
        return None
    return found.group("dataset"), window, int(found.group("part"))


_PART_RE = re.compile(
    r"^(?P<dataset>[a-z_]+)/date=(?P<date>\d{4}-\d{2}-\d{2})/"
    r"(?P=dataset)-(?P<from_ms>\d+)-(?P<to_ms>\d+)-(?P<part>\d{4}|[1-9]\d{4,})\.(?P<format>jsonl\.gz|parquet)$"
)
_SNAPSHOT_RE = re.compile(
    r"^subscribers/date=(?P<date>\d{4}-\d{2}-\d{2})/(?:subscribers-(?P<part>\d{4}|[1-9]\d{4,})\.(?P<format>jsonl\.gz|parquet)|_SUCCESS)$"
)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """A key relative to the export prefix, as `verify` reads it back."""

    dataset: str
    date: str
    window: Window | None
    part: int | None
    is_success: bool = False
    #: The part's file format; ``None`` for ``_SUCCESS``.
    format: FileFormat | None = None


def parse_key(relative_key: str) -> ParsedKey | None:
    """Parse a key below the prefix; ``None`` if it is not a name we ever write in a dataset folder."""
    snap = _SNAPSHOT_RE.match(relative_key)
    if snap:
        part = snap.group("part")
        return ParsedKey(
            SNAPSHOT_DATASET,
            snap.group("date"),
            None,
            int(part) if part else None,
            is_success=part is None,
            format=parse_format(snap.group("format")) if part else None,
        )
    match = _PART_RE.match(relative_key)
    if not match:
        return None
    try:
        window = Window(int(match.group("from_ms")), int(match.group("to_ms")))
    except ValueError:
        return None
    return ParsedKey(
        match.group("dataset"),
        match.group("date"),
        window,
        int(match.group("part")),
        format=parse_format(match.group("format")),
    )
