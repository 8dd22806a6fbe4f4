"""What `verify` found, and how it is shown: text for people, JSON for scripts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.management.terminal import escape


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the bucket. ``key`` is the object (or id) it is about."""

    kind: str
    dataset: str
    key: str
    detail: str
    count: int = 1
    locations: tuple[str, ...] = ()


@dataclass(slots=True)
class DatasetSummary:
    windows: int = 0
    days: int = 0
    parts: int = 0
    rows: int = 0
    bytes: int = 0
    first: str | None = None
    last: str | None = None
    #: Windows that continue, with late rows, a window delivered at an earlier location (a move).
    continued: int = 0


@dataclass(slots=True)
class VerifyReport:
    source: str
    datasets: dict[str, DatasetSummary] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    ledger_checked: bool = False
    #: Window manifests read (`verify.manifests`); with them, completeness is proven from the bucket.
    manifests: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "ledger_checked": self.ledger_checked,
            "manifests": self.manifests,
            "datasets": {name: asdict(s) for name, s in self.datasets.items()},
            "problems": [{**asdict(p), "locations": list(p.locations)} for p in self.problems],
        }

    def to_json(self) -> str:
        # ensure_ascii (the default): every control or non-ASCII character leaves as a \u escape.
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=True)

    def render(self, max_problems: int = 200) -> str:
        """For a terminal: every key and message escaped (`terminal.escape`), so an object named
        ``\x1b[2J\rOK`` cannot clear the screen or forge a verdict."""
        lines = [f"verify {escape(self.source)}"]
        for name, s in self.datasets.items():
            span = f" {s.first} .. {s.last}" if s.first else ""
            unit = _plural(s.days, "day") if DATASETS[name].is_snapshot else _plural(s.windows, "window")
            counts = f"{_plural(s.parts, 'part')}, {_plural(s.rows, 'row')}, {s.bytes:,} bytes"
            lines.append(f"  {name:<14} {unit}, {counts}{span}")
            if s.continued:
                lines.append(
                    f"  {'':<14} {_plural(s.continued, 'window')} continue windows delivered at an earlier location "
                    "(late rows after a destination change; their first parts are there)"
                )
        if self.manifests:
            lines.append(f"  {_plural(self.manifests, 'window manifest')} checked against the objects")
        if self.ledger_checked:
            lines.append("  rows per window compared with the control-plane ledger")
        if self.ok:
            lines.append("OK: no problems found")
            return "\n".join(lines)
        lines.append(f"FAILED: {len(self.problems)} problem(s)")
        for p in self.problems[:max_problems]:
            lines.append(f"  [{escape(p.kind)}] {escape(p.dataset)}: {escape(p.key)}: {escape(p.detail)}")
            lines.extend(f"      at {escape(loc)}" for loc in p.locations)
        if len(self.problems) > max_problems:
            lines.append(f"  ... and {len(self.problems) - max_problems} more (use --json for all)")
        return "\n".join(lines)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"
