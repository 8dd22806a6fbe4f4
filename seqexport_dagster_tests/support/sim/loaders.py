"""The two customer loaders the oracles play, each reading the simulated buckets as a customer would.

- `SnowpipeLoader`: loads every object name once, the first time it sees it, and never again
  (Snowpipe, ``COPY INTO``), whatever the object later becomes; except an object an operator's
  replace overwrote, which it loads again once with its new content (the customer's forced reload
  of a rewritten day that docs/customers.md asks for: Snowpipe alone never sees a name's new
  content; sim seeds 10000004 and 10000015).
- `WindowLoader`: the "incremental loading by window" of docs/customers.md, per location and
  dataset (reloading a part an operator's replace rewrote, as the Snowpipe loader does, seeds
  10000142 and 10000194): a watermark; the window whose ``fromMs`` is the watermark is loaded (all
  its parts) once the next window's part 0000 exists, then the watermark moves to its ``toMs``; parts of windows
  that ended in the last 7 days that it has not loaded yet are loaded too (late rows: what the docs
  tell a loader since simholes; a daily export's late part can come 2 days after its window, seed
  5000). A hole in a location's chain
  (a dataset removed and added again) is stepped over to the next window. At a place after a move,
  parts of windows before the chain's first window (late rows of a window delivered at the old
  place, continued here) are loaded as they appear, whatever their age: docs/customers.md, "let it
  load parts it has not seen, including those of windows before its watermark" (sim seed 5000: a
  late part continued at the new prefix after the new chain had begun was never loaded).

Both read both formats (gzip JSONL, Parquet: `ids_of`) and record, per export, which object each
row id was loaded from, so a duplicate or a loss can be traced to names.
"""

from __future__ import annotations

import gzip
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from seqexport_dagster.contract.file_format import PARQUET, format_of_key
from seqexport_dagster.contract.keys import parse_key
from seqexport_dagster.contract.window import DAY_MS, Window
from seqexport_dagster_tests.support.sim.bucket import Buckets, MemoryBucket
from seqexport_dagster_tests.support.sim.model import Place

_CACHE: dict[bytes, list[str]] = {}
#: How far back the window loader looks for parts it has not loaded (docs/customers.md).
RELOAD_MS = 7 * DAY_MS


def ids_of(key: str, body: bytes) -> list[str]:
    """The ``id`` of each row of a part, in file order: each line of a gzip JSONL part, the ``id``
    column of a Parquet one (by the key's extension; cached by body: parts never change)."""
    cached = _CACHE.get(body)
    if cached is None:
        if format_of_key(key) == PARQUET:
            # Imported here: only worlds with a Parquet export pay for it. `ParquetFile`, not
            # `read_table` (which imports pyarrow.dataset and pandas: 2.5 CPU-s); one thread for a
            # small file costs less than the pool.
            import pyarrow.parquet as pq

            table = pq.ParquetFile(io.BytesIO(body)).read(columns=["id"], use_threads=False)
            cached = [str(i) for i in table.column("id").to_pylist()]
        else:
            text = gzip.decompress(body).decode()
            cached = [json.loads(line)["id"] for line in text.splitlines() if line]
        if len(_CACHE) > 200_000:
            _CACHE.clear()
        _CACHE[body] = cached
    return cached


@dataclass
class Loaded:
    """Per (dataset, id): the objects a loader loaded it from."""

    rows: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    #: Objects named like a part that the loader could not read (a customer's load would fail).
    unreadable: list[str] = field(default_factory=list)

    def add(self, dataset: str, key: str, body: bytes, where: str) -> None:
        try:
            ids = ids_of(key, body)
        except Exception as exc:  # whatever the decoder raises, the load fails
            self.unreadable.append(f"{where}: {type(exc).__name__}: {str(exc)[:80]}")
            return
        for i in ids:
            self.rows[(dataset, i)].append(where)


def unseen(seen: set[Any], reloaded: dict[Any, bytes], mark: Any, bucket: MemoryBucket, key: str, body: bytes) -> bool:
    """Whether a loader that loads each name once loads ``key`` now: never loaded yet (``mark`` not
    in ``seen``), or rewritten by an operator's replace since it was loaded; the customer reloads a
    rewritten day once (docs/customers.md)."""
    return mark not in seen or (key in bucket.replaced_on_purpose and reloaded.get(mark) != body)


def mark_loaded(
    seen: set[Any], reloaded: dict[Any, bytes], mark: Any, bucket: MemoryBucket, key: str, body: bytes
) -> None:
    seen.add(mark)
    if key in bucket.replaced_on_purpose:
        reloaded[mark] = body


def relative(place: Place, key: str) -> str | None:
    head = place.prefix + "/" if place.prefix else ""
    return key[len(head) :] if key.startswith(head) else None


@dataclass
class SnowpipeLoader:
    seen: set[tuple[str, str]] = field(default_factory=set)
    by_export: dict[str, Loaded] = field(default_factory=lambda: defaultdict(Loaded))
    #: (bucket, key) -> the body loaded last, of the objects an operator's replace overwrote.
    reloaded: dict[tuple[str, str], bytes] = field(default_factory=dict)

    def poll(self, buckets: Buckets, export: str, places: list[Place]) -> None:
        loaded = self.by_export[export]
        for place in places:
            bucket = buckets.get(place.bucket)
            for key, body in list(bucket.objects.items()):
                mark = (place.bucket, key)
                if not unseen(self.seen, self.reloaded, mark, bucket, key, body):
                    continue
                rel = relative(place, key)
                parsed = parse_key(rel) if rel is not None else None
                if parsed is None or parsed.is_success:
                    continue
                mark_loaded(self.seen, self.reloaded, mark, bucket, key, body)
                loaded.add(parsed.dataset, key, body, f"s3://{place.bucket}/{key}")


@dataclass
class _Chain:
    watermark: int | None = None
    #: Where the chain began at this place (its first window's ``fromMs``).
    first_ms: int | None = None
    continued: set[Window] = field(default_factory=set)
    loaded_parts: set[str] = field(default_factory=set)
    #: key -> the body loaded last, of the parts an operator's replace overwrote.
    reloaded: dict[str, bytes] = field(default_factory=dict)
    loaded_windows: dict[Window, int] = field(default_factory=dict)  # window -> to_ms (for "last day")


@dataclass
class WindowLoader:
    chains: dict[tuple[str, str, str], _Chain] = field(default_factory=lambda: defaultdict(_Chain))
    by_export: dict[str, Loaded] = field(default_factory=lambda: defaultdict(Loaded))
    gaps_stepped: int = 0

    def poll(self, buckets: Buckets, export: str, places: list[Place], now_ms: int, *, final: bool = False) -> None:
        loaded = self.by_export[export]
        for i, place in enumerate(places):
            bucket = buckets.get(place.bucket)
            windows: dict[tuple[str, Window], dict[int, str]] = defaultdict(dict)
            for key in bucket.objects:
                rel = relative(place, key)
                parsed = parse_key(rel) if rel is not None else None
                if parsed is None or parsed.window is None or parsed.part is None:
                    continue
                windows[(parsed.dataset, parsed.window)][parsed.part] = key
            for dataset in {d for d, _ in windows}:
                mine = sorted(w for d, w in windows if d == dataset)
                chain = self.chains[(place.bucket, place.prefix, dataset)]
                fresh = self._advance(chain, dataset, mine, windows, final)
                if i > 0 and chain.first_ms is not None:
                    for w in mine:  # continued windows of an earlier place: before the watermark
                        if w.to_ms <= chain.first_ms and w not in chain.loaded_windows:
                            chain.loaded_windows[w] = w.to_ms
                            chain.continued.add(w)
                for w in list(chain.loaded_windows):
                    if w.to_ms < now_ms - RELOAD_MS and not final and w not in fresh and w not in chain.continued:
                        continue
                    for _, key in sorted(windows[(dataset, w)].items()):
                        self._load(chain, loaded, bucket, key, dataset, place)

    def _advance(
        self,
        chain: _Chain,
        dataset: str,
        mine: list[Window],
        windows: dict[tuple[str, Window], dict[int, str]],
        final: bool,
    ) -> set[Window]:
        fresh: set[Window] = set()
        starts = {w.from_ms: w for w in mine}
        if chain.watermark is None and mine:
            chain.watermark = chain.first_ms = mine[0].from_ms
        while chain.watermark is not None:
            w = starts.get(chain.watermark)
            if w is None:
                later = [x for x in mine if x.from_ms > chain.watermark]
                if not later:
                    return fresh
                self.gaps_stepped += 1
                chain.watermark = later[0].from_ms
                continue
            following = starts.get(w.to_ms)
            complete = following is not None and 0 in windows[(dataset, following)]
            if not (complete or final):
                return fresh
            chain.loaded_windows[w] = w.to_ms
            fresh.add(w)
            chain.watermark = w.to_ms
        return fresh

    def _load(self, chain: _Chain, loaded: Loaded, bucket: MemoryBucket, key: str, dataset: str, place: Place) -> None:
        """A part once; again once with its new content after an operator's replace rewrote it, as
        the Snowpipe loader does (seeds 10000142, 10000194: a replaced part 0000 never re-read)."""
        body = bucket.objects[key]
        if not unseen(chain.loaded_parts, chain.reloaded, key, bucket, key, body):
            return
        mark_loaded(chain.loaded_parts, chain.reloaded, key, bucket, key, body)
        loaded.add(dataset, key, body, f"s3://{place.bucket}/{key}")
