"""Regenerate the published schema files and README tables from `seqexport_dagster.schema`.

Run ``python -m seqexport_dagster.schema_publish`` after changing a dataset; a test fails if the
committed files drift from the definition.
"""

from __future__ import annotations

import sys
from pathlib import Path

from seqexport_dagster.schema import DATASETS, README_BEGIN, README_END, json_schema_text, readme_section

SCHEMA_DIR = Path(__file__).parent / "schemas"
README = Path(__file__).parent.parent / "README.md"


def render_readme(text: str) -> str:
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    return text[:start] + readme_section() + text[end:]


def main() -> int:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for ds in DATASETS.values():
        (SCHEMA_DIR / f"{ds.name}.json").write_text(json_schema_text(ds))
    README.write_text(render_readme(README.read_text()))
    sys.stdout.write(f"wrote {len(DATASETS)} schema files and the README tables\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
