"""The table an export may keep beside its files: none, or a Delta Lake log per dataset (issue 44).

A table commits the export's Parquet parts, so it needs ``--format parquet`` (`require_parquet`):
gzip JSON Lines is not a table format any reader accepts.
"""

from __future__ import annotations

from typing import Final

from seqexport_dagster.contract.file_format import PARQUET
from seqexport_dagster.errors import InvalidInput

DELTA: Final = "delta"
TABLES: Final = (DELTA,)


def parse_table(value: object) -> str | None:
    """``delta`` or none (None, ``""`` or ``"none"``)."""
    if value in (None, "", "none"):
        return None
    if value == DELTA:
        return DELTA
    raise InvalidInput("table", f"{value!r} is not a table format; use delta (with format parquet) or none")


def require_parquet(table: str | None, file_format: str) -> None:
    """A table commits Parquet parts: refuse a table without Parquet, and Parquet's removal under one."""
    if table is not None and file_format != PARQUET:
        raise InvalidInput(
            "table",
            f"a {table} table needs the parquet format (this export writes {file_format}); set --format parquet",
        )
