"""The table an export may keep beside its files: none, or a Delta Lake log per dataset (issue 44).

A table commits the export's Parquet parts, so it needs the ``parquet`` format (`require_parquet`):
gzip JSON Lines is not a table format any reader accepts. Light on purpose: the remote CLI checks
with it before anything is sent (test_remote_cli_imports).
"""

from __future__ import annotations

from typing import Final, Literal

from seqexport_dagster.contract.file_format import PARQUET
from seqexport_dagster.errors import InvalidInput

DELTA: Final = "delta"
TABLES: Final = (DELTA,)
#: What "no table" is written as: the CLI's word, and the HTTP API's besides ``null``.
NONE: Final = "none"


def parse_table(value: object) -> str | None:
    """``delta`` or none (None, ``""`` or ``"none"``)."""
    if value in (None, "", NONE):
        return None
    if value == DELTA:
        return DELTA
    raise InvalidInput("table", f"{value!r} is not a table format; use delta (with format parquet) or none")


def require_parquet(
    table: str | None,
    file_format: str,
    *,
    changing: Literal["create", "table", "format"] = "create",
    export_id: str = "EXPORT_ID",
) -> None:
    """A table commits Parquet parts: refuse a table without Parquet, and Parquet's removal under one.

    ``changing`` says which setting the caller is changing, so the message says what to do first
    (for ``export_id``); the field named is ``table`` either way (the table is what needs Parquet).
    """
    if table is None or file_format == PARQUET:
        return
    if changing == "format":
        problem = (
            f"this export keeps a {table} table, which needs the parquet format: turn the table off first "
            f'(seqexport table {export_id} none; HTTP: PATCH .../table {{"table": null}}), then change the '
            f"format to {file_format}"
        )
    elif changing == "table":
        problem = (
            f"a {table} table needs the parquet format and this export writes {file_format}: change the format "
            f"to parquet first (seqexport format {export_id} parquet; HTTP: PATCH .../format)"
        )
    else:
        problem = (
            f"a {table} table needs the parquet format, not {file_format}: create the export with format "
            'parquet (--format parquet; HTTP: "format": "parquet")'
        )
    raise InvalidInput("table", problem)
