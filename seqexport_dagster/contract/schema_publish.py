"""Regenerate the published schema files and the row-schema tables of ``docs/customers.md``.

Run ``python -m seqexport_dagster.contract.schema_publish`` after changing a dataset; a test fails if the
committed files drift from the definition in `seqexport_dagster.contract.schema`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from seqexport_dagster.contract.schema import (
    DATASETS,
    TABLES_BEGIN,
    TABLES_END,
    json_schema_text,
    parquet_schema_text,
    schema_tables,
)

SCHEMA_DIR = Path(__file__).parent / "schemas"
#: The columns of ``.parquet`` parts, beside the JSON Schemas of ``.jsonl.gz`` lines.
PARQUET_SCHEMA_DIR = SCHEMA_DIR / "parquet"
#: The customers' document: its "Row schemas" section holds the generated tables between the markers.
CUSTOMER_DOC = Path(__file__).parents[2] / "docs" / "customers.md"


def render_tables(text: str) -> str:
    """``text`` with the generated tables between its markers replaced by the current ones."""
    start, end = text.index(TABLES_BEGIN), text.index(TABLES_END) + len(TABLES_END)
    return text[:start] + schema_tables() + text[end:]


def main() -> int:
    SCHEMA_DIR.mkdir(exist_ok=True)
    PARQUET_SCHEMA_DIR.mkdir(exist_ok=True)
    for ds in DATASETS.values():
        (SCHEMA_DIR / f"{ds.name}.json").write_text(json_schema_text(ds))
        (PARQUET_SCHEMA_DIR / f"{ds.name}.json").write_text(parquet_schema_text(ds))
    CUSTOMER_DOC.write_text(render_tables(CUSTOMER_DOC.read_text()))
    sys.stdout.write(f"wrote {2 * len(DATASETS)} schema files and the tables in {CUSTOMER_DOC.name}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
