"""The widened world (issue 39): what production does that the first simulator did not draw.

- `Schedule`: when the Dagster daemon ticks. The first world ticked every 4 to 16 minutes, so runs
  landed on nearly every frequency slot; here each seed draws a regime (every step, hourly at a
  random minute, random gaps of 30 seconds to 4 hours) plus daemon outages of 1 to 10 hours and
  bursts of ticks 30 seconds apart (a queue draining, export-now, catch-up windows off the grid).
- `Storms`: faults in episodes, not only independent draws: for 20 minutes to 3 hours every store
  send and control-plane call fails far more often, pushing datasets into long backoff.
- `hostile_json`: source JSON values a customer's application can send: text spread over lines (one
  of them a complete row of its own), duplicate keys, deep nesting, escapes, large values, numbers at
  the edges. The value oracle (`value_violations`) then reads every part a customer loads: each row's
  ``properties`` equals its source value, no line has a duplicate key, and no row id is one the
  source never held (a forged row).

Each draws from a stream of its own (``Random(f"{seed}/schedule")`` and so on), and only worlds built
with ``wide=1`` use them, so every older seed keeps its history.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from dataclasses import dataclass, field
from typing import Any

from seqexport_dagster.contract.file_format import PARQUET, format_of_key
from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS

REGIMES = ("every step", "hourly", "random gaps")


@dataclass
class Schedule:
    """Whether the daemon ticks at a step of the simulated clock."""

    rng: random.Random
    regime: str = ""
    next_tick_ms: int = 0
    down_until_ms: int = 0
    minute_ms: int = 0
    ticks: int = 0
    skipped: int = 0
    outages: int = 0

    def __post_init__(self) -> None:
        self.regime = self.rng.choice(REGIMES)
        self.minute_ms = self.rng.randrange(0, 60) * MINUTE_MS

    def ticks_at(self, now_ms: int) -> bool:
        if now_ms < self.down_until_ms:
            self.skipped += 1
            return False
        if self.rng.random() < 0.01:  # the daemon goes down (a deploy gone wrong, a host lost)
            self.down_until_ms = now_ms + self.rng.randrange(HOUR_MS, 10 * HOUR_MS)
            self.outages += 1
            self.skipped += 1
            return False
        if self.regime == "every step" or now_ms >= self.next_tick_ms:
            if self.regime == "hourly":
                self.next_tick_ms = (now_ms // HOUR_MS + 1) * HOUR_MS + self.minute_ms
            elif self.regime == "random gaps":
                self.next_tick_ms = now_ms + self.rng.randrange(30_000, 4 * HOUR_MS)
            self.ticks += 1
            return True
        self.skipped += 1
        return False

    def burst(self) -> list[int]:
        """Extra ticks right after one (ms after it): a queue draining, a retried run."""
        if self.rng.random() >= 0.05:
            return []
        return [self.rng.randrange(30_000, 3 * MINUTE_MS) for _ in range(self.rng.randint(1, 3))]


@dataclass
class Storms:
    """Fault storms: while one lasts, the world's fault rates are raised."""

    rng: random.Random
    until_ms: int = 0
    count: int = 0
    saved: Any = None

    def step(self, faults: Any, now_ms: int) -> None:
        if self.saved is not None and now_ms >= self.until_ms:
            faults.rates, self.saved = self.saved, None
        if self.saved is None and faults.enabled and self.rng.random() < 0.01:
            self.saved = faults.rates
            stormy = type(faults.rates)(**vars(faults.rates))
            stormy.server_error = max(stormy.server_error, 0.4)
            stormy.reset = max(stormy.reset, 0.1)
            stormy.lost_reply = max(stormy.lost_reply, 0.1)
            stormy.db_error = max(stormy.db_error, 0.05)
            faults.rates = stormy
            self.until_ms = now_ms + self.rng.randrange(20 * MINUTE_MS, 3 * HOUR_MS)
            self.count += 1

    def end(self, faults: Any) -> None:
        if self.saved is not None:
            faults.rates, self.saved = self.saved, None


def hostile_json(rng: random.Random) -> str:
    """One valid JSON object as an application might send it, in hostile text."""
    kind = rng.randrange(8)
    if kind == 0:  # spread over lines, the middle one a complete row of its own
        forged = json.dumps({"id": f"evt_FORGED_{rng.randrange(10**6)}", "name": "forged"})
        return '{"note":\n' + forged + "\n}"
    if kind == 1:  # duplicate keys (JSON parsers keep the last)
        return '{"plan": "free", "plan": "pro", "n": 1, "n": 2}'
    if kind == 2:  # deep nesting
        depth = rng.randint(10, 60)
        return '{"d":' + "[" * depth + '"bottom"' + "]" * depth + "}"
    if kind == 3:  # escapes, separators and characters loaders trip on
        return json.dumps(
            {"s": 'a\nb\r\tc "q" \\ \u2028 \u2029 \x00 é 🔑', "k\n": "v"}, ensure_ascii=rng.random() < 0.5
        )
    if kind == 4:  # a large value
        return json.dumps({"blob": "x" * rng.randrange(1_000, 40_000)})
    if kind == 5:  # numbers at the edges
        return '{"big": 123456789012345678901234567890, "tiny": 1e-320, "neg0": -0, "e": 1E+2, "f": 0.1}'
    if kind == 6:  # indented as a pretty-printer would
        return json.dumps({"a": [1, {"b": None, "c": True}], "z": {}}, indent=rng.randint(1, 4))
    return json.dumps({"trailing": "", "id": "looks like an id", "recorded_at": "2000-01-01T00:00:00.000Z"})


@dataclass
class ValueCheck:
    """What the value oracle read."""

    rows: int = 0
    hostile: int = 0
    seen: set[bytes] = field(default_factory=set)


def _line(line: bytes) -> tuple[dict[str, Any], bool]:
    """A JSON line and whether its own keys are unique (a value's nested objects may repeat keys, as
    their source did; the hook sees the line's object last)."""
    unique: list[bool] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        unique.append(len({k for k, _ in pairs}) == len(pairs))
        return dict(pairs)

    row = json.loads(line, object_pairs_hook=hook)
    return row, unique[-1]


def part_rows(key: str, body: bytes) -> list[tuple[str, Any, bool]]:
    """``(id, properties, top-level keys unique)`` of every row of a custom_events part."""
    if format_of_key(key) == PARQUET:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(io.BytesIO(body)).read(columns=["id", "properties"], use_threads=False)
        return [
            (str(i), None if p is None else json.loads(p), True)
            for i, p in zip(table.column("id").to_pylist(), table.column("properties").to_pylist(), strict=True)
        ]
    out = []
    for line in gzip.decompress(body).splitlines():
        if not line:
            continue
        row, unique = _line(line)
        out.append((str(row.get("id")), row.get("properties"), unique))
    return out


def value_violations(world: Any, check: ValueCheck) -> list[tuple[str, str, str]]:
    """``(export or bucket, detail, row id)`` for every row a customer would load wrongly."""
    found: list[tuple[str, str, str]] = []
    source = world.source
    for bucket in world.buckets.by_name.values():
        for key, body in bucket.objects.items():
            name = key.rsplit("/", 1)[-1]
            if not name.startswith("custom_events-") or not name.endswith((".jsonl.gz", ".parquet")):
                continue  # not a part (a manifest, _SUCCESS, a connection test)
            if body in check.seen:
                continue
            check.seen.add(body)
            try:
                rows = part_rows(key, body)
            except Exception as exc:  # an unreadable part is what the oracle reports
                found.append((bucket.name, f"{key} cannot be read: {type(exc).__name__}", ""))
                continue
            for row_id, properties, unique in rows:
                check.rows += 1
                if row_id not in source.rows:
                    found.append((bucket.name, f"{key} holds row {row_id}, which the source never held", row_id))
                elif not unique:
                    found.append((bucket.name, f"{key}: the line of {row_id} has a duplicate key", row_id))
                elif row_id in source.hostile:
                    check.hostile += 1
                    if properties != json.loads(source.hostile[row_id]):
                        found.append((bucket.name, f"{key}: row {row_id}'s properties differ from the source", row_id))
    return found
