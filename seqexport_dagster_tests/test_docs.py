"""The documents by audience: a short README with the two commands, and links that resolve.

The README is the first page a new user reads: what it is, `make demo`, `make test`, `make dev`, and
where to read next. Everything else lives in docs/ (customers, operators, cli, performance), and a
link from one document to another must land on a file and a heading that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/customers.md", "docs/operators.md", "docs/cli.md", "docs/performance.md", "CHANGELOG.md")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_is_short_and_gives_the_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for command in ("make demo", "make test", "make dev"):
        assert f"\n{command}" in readme, command
    for doc in DOCS[1:]:
        assert f"]({doc})" in readme, f"the README does not point at {doc}"
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("name", DOCS)
def test_links_land_on_files_and_headings_that_exist(name: str) -> None:
    doc = ROOT / name
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{name}: {target} names no file"
        if anchor:
            assert anchor in _anchors(path), f"{name}: {target} names no heading of {path.name}"


def test_customers_never_need_to_read_about_dagster() -> None:
    """Customers see their bucket, the CLI and the HTTP API; the package's name is no mention."""
    customers = (ROOT / "docs" / "customers.md").read_text().lower()
    assert re.findall(r"(?<![\w/.])dagster(?!\w)", customers) == []
