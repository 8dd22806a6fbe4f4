"""The docs' Snowflake statements on fakesnow (Snowflake emulated on DuckDB), and what fakesnow cannot run.

fakesnow 0.12.1 runs ``CREATE STAGE`` (a ``file://`` URL stands for the bucket), ``CREATE FILE FORMAT``,
``CREATE TABLE``, ``COPY INTO`` of Parquet with ``MATCH_BY_COLUMN_NAME`` and ``FILES``, and the views
(``QUALIFY``, ``raw:field::TYPE``, ``PARSE_JSON``, ``REGEXP_SUBSTR``). It cannot run, and so this module
stands in for, exactly three things, each checked by other means in ``test_warehouse_snowflake``:
- ``PATTERN``: it refuses the option, and lists only one folder level. The statement's regular expression
  is applied here to every key under the ``FROM`` location (recursively, as Snowflake does), and the COPY
  runs with ``FILES = (...)`` naming what it matched;
- ``INCLUDE_METADATA = (file = METADATA$FILENAME)``: refused; the column is set to the stage-relative
  path after each file's COPY;
- the JSONL COPY's transform ``(SELECT $1, METADATA$FILENAME FROM @stage/...)``: fakesnow fails on it
  (and reads a stage's JSON file format as CSV), so each line of each matching part is inserted as
  Snowflake's documented JSON load does, one VARIANT per line with the file's stage-relative path.
"""

from __future__ import annotations

import gzip
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATEMENT_END = re.compile(r";\s*(?:\n|$)")


def statements(text: str) -> list[str]:
    """One generated block split into its statements (none of ours has a ``;`` inside a literal)."""
    return [s.strip() for s in STATEMENT_END.split(text) if s.strip()]


@contextmanager
def session() -> Iterator[Any]:
    """A fakesnow cursor on a database of its own."""
    import fakesnow
    import snowflake.connector

    with warnings.catch_warnings(), fakesnow.patch():
        conn = snowflake.connector.connect(database="sequenzy_test", schema="loading")
        try:
            yield conn.cursor()
        finally:
            conn.close()


def copy_files(stage_root: Path, location: str, pattern: str) -> list[str]:
    """The keys a ``COPY ... FROM @stage/<location> PATTERN = '<pattern>'`` loads, relative to the location.

    A bulk COPY applies the regular expression to the whole path, the ``FROM`` location's folders
    included (Snowpipe trims only the stage's own path): here, the path from the stage's root."""
    base = stage_root / location
    found = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
    return [key for key in found if re.fullmatch(pattern, location + key)]


def run(cursor: Any, text: str, stage_root: Path) -> list[str]:
    """Run every statement of ``text``; COPY statements as described above. Returns the keys loaded."""
    loaded: list[str] = []
    for statement in statements(text):
        if re.search(r"^COPY INTO", statement, re.M):
            loaded += _copy(cursor, statement, stage_root)
        else:
            cursor.execute(statement)
    return loaded


def _copy(cursor: Any, statement: str, stage_root: Path) -> list[str]:
    (pattern,) = re.findall(r"^PATTERN = '([^']*)'$", statement, re.M)
    (location,) = re.findall(r"@\w+/(\S*?)\)?$", statement, re.M)
    (table,) = re.findall(r"COPY INTO (\w+)", statement)
    keys = copy_files(stage_root, location, pattern)
    if "$1, METADATA$FILENAME" in statement:
        for key in keys:
            lines = gzip.decompress((stage_root / location / key).read_bytes()).decode().splitlines()
            if lines:
                values = ", ".join(["(%s, %s)"] * len(lines))
                cursor.execute(
                    f"INSERT INTO {table} (raw, file) SELECT PARSE_JSON(column1), column2 FROM VALUES {values}",
                    [v for line in lines for v in (line, location + key)],
                )
        return keys
    metadata = "INCLUDE_METADATA = (file = METADATA$FILENAME)" in statement
    bare = "\n".join(
        line for line in statement.splitlines() if not line.startswith(("PATTERN =", "INCLUDE_METADATA ="))
    )
    for key in keys:
        cursor.execute(f"{bare}\nFILES = ('{key}')")
        if metadata:
            cursor.execute(f"UPDATE {table} SET file = %s WHERE file IS NULL", (location + key,))
    return keys
