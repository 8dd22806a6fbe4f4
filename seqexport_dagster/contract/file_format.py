"""The file formats an export can write: gzip JSON Lines (the contract's default) or Parquet.

A format owns what differs between them and nothing else: the file extension in the part names (here),
the writer that cuts rows into parts and the body of an empty part (`writer.part_writer`, `writer.empty_body`). Names, the 50,000-row limit, the
part ledger and the write-once rules are the same for both (DESIGN §4).

The format of a window is fixed by its first part at a location: a retry, a late part or a replace
keeps the extension the window already has there, so a window is never split across formats even
when the export's format changes in between (`window_format`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from seqexport_dagster.errors import InvalidInput

FileFormat = Literal["jsonl.gz", "parquet"]
JSONL_GZ: Final[FileFormat] = "jsonl.gz"
PARQUET: Final[FileFormat] = "parquet"
FORMATS: Final[tuple[FileFormat, ...]] = (JSONL_GZ, PARQUET)
DEFAULT_FORMAT: Final[FileFormat] = JSONL_GZ


def parse_format(value: object) -> FileFormat:
    for fmt in FORMATS:
        if value == fmt:
            return fmt
    raise InvalidInput("format", f"{value!r} is not a file format; use one of {', '.join(FORMATS)}")


def extension(fmt: FileFormat) -> str:
    """The suffix after the part number: ``.jsonl.gz`` or ``.parquet``."""
    return f".{fmt}"


def format_of_key(key: str) -> FileFormat | None:
    """The format a part key was written in, from its extension; ``None`` for anything else."""
    for fmt in FORMATS:
        if key.endswith(extension(fmt)):
            return fmt
    return None


def window_format(keys: Iterable[str], default: FileFormat) -> FileFormat:
    """The format of a window at a location: that of the parts it already has there, else ``default``."""
    for key in keys:
        fmt = format_of_key(key)
        if fmt is not None:
            return fmt
    return default
