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


#: Sentences that weaken the delivery guarantee of customers.md ("every row is delivered exactly
#: once, no file is ever replaced") for ordinary delivery. Webhook notifications are a different
#: delivery, at least once by design, so sections under a heading that names webhooks are exempt;
#: so is the documented exception, a day rewritten on request, which no pattern below describes.
_WEAKER_THAN_EXACTLY_ONCE = (
    r"\bat[- ]least[- ]once\b",
    r"\b(?:can|may|might|could|will)\s+(?:appear|arrive|be\s+delivered|be\s+loaded|be\s+written|show\s+up)\s+"
    r"(?:twice|more\s+than\s+once|again|two\s+times)",
    r"\brewritten\s+by\s+a\s+retry\b",
    r"\bretr(?:y|ies)\s+(?:rewrites?|replaces?|overwrites?|duplicates?)\b",
    r"\b(?:after|on)\s+a\s+retry\b[^.]*\b(?:twice|duplicate|more\s+than\s+once)",
)


def _ordinary_delivery_prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every prose line outside code blocks and webhook sections."""
    kept: list[tuple[int, str]] = []
    headings: dict[int, str] = {}
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"^(#{1,6}) (.+)$", line)
        if heading and not fenced:
            level = len(heading.group(1))
            headings = {k: v for k, v in headings.items() if k < level}
            headings[level] = heading.group(2).lower()
            continue
        if not fenced and not any("webhook" in h for h in headings.values()):
            kept.append((number, line))
    return kept


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_no_page_says_ordinary_delivery_is_weaker_than_exactly_once(name: str) -> None:
    """Issue 42: customers.md said "exactly once" in one place and "at least once; a retry can
    duplicate a row" in two others. Sentences span lines, so each paragraph is read joined up."""
    lines = _ordinary_delivery_prose((ROOT / "docs" / name).read_text())
    paragraphs: list[tuple[int, str]] = []
    for number, line in lines:
        if not line.strip():
            continue
        if paragraphs and paragraphs[-1][0] + paragraphs[-1][1].count("\n") + 1 == number:
            paragraphs[-1] = (paragraphs[-1][0], paragraphs[-1][1] + "\n" + line)
        else:
            paragraphs.append((number, line))
    found = [
        f"docs/{name}:{start}: {match.group(0)!r}"
        for start, paragraph in paragraphs
        for pattern in _WEAKER_THAN_EXACTLY_ONCE
        for match in re.finditer(pattern, paragraph.replace("\n", " "), re.I)
    ]
    assert found == [], "delivery is exactly once (customers.md, Delivery guarantees): " + "; ".join(found)


def test_the_guarantee_check_catches_the_old_sentences() -> None:
    """The patterns above find the sentences issue 42 quoted, and leave the documented exception."""
    old = (
        "- **Deduplicate on `id`.** Delivery is at least once: after a retry that changed the file count a\n"
        "  row can appear twice (identical, same `id`).\n\n"
        "window once; a file rewritten by a retry is loaded again and the view hides the repeat.\n"
    )
    exception = "An operator can rewrite a day's files under the same names (a backfill with replace)."
    joined = old.replace("\n", " ")
    assert sum(bool(re.search(p, joined, re.I)) for p in _WEAKER_THAN_EXACTLY_ONCE) >= 3
    assert not any(re.search(p, exception, re.I) for p in _WEAKER_THAN_EXACTLY_ONCE)
    webhooks = "## Webhooks\n\n**Delivery.** At least once. An event may therefore arrive more than once.\n"
    assert _ordinary_delivery_prose(webhooks) == []
