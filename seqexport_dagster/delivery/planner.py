"""The one planner: what is due, for the scheduler sensor and for the run, from the same inputs.

Pure: no dagster, no database. Callers pass what they read (exports, the unfinished attempt at each
position, the windows already committed on a day) and the time; the planner decides
- which windows of (export, dataset) are due now: the unfinished window's exact bounds first (a
  retry rewrites "the same window with the same file names"), then the chain on the frequency grid,
  or up to now − lag under "export now", in catch-up windows of at most a day;
- whether the subscriber snapshot of a day is due (once the day is over plus the lag), and a past
  day whose backfill or replace failed (`owed_snapshot_day`);
- backoff: nothing of a dataset is due while it waits out min(frequency × 2^(n−1), 6 h), unless
  "export now" was pressed, which lifts the wait for one immediate attempt (the store does);
- what a backfill of a day re-delivers: the committed windows of that day with their bounds, then
  what is due, and never anything before the dataset's start;
- how due work is batched into runs (`batch`), and through which day each export's dataset is
  complete (`complete_through`), which turns a dataset's day green.

The sensor (`defs/sensors.py`) and the runner (`Runner.due_windows`, `Runner.windows_for_day`)
both call this module, so they cannot disagree about what is due.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, MINUTE_MS, Window, day_of, due_windows
from seqexport_dagster.store import ACTIVE, DatasetState, ExportRecord

#: A run that ended without moving any position (worker crash, terminated from the UI) is
#: requested again after at most this long: the slot is part of the run key.
RELAUNCH_SLOT_MS: Final = 15 * MINUTE_MS
#: Batching rule (`batch`): at most this many exports per run... Dagster writes about 16 event-log
#: rows of its own per run whatever it carries, so the run count is what the event log grows with:
#: at 3,000 exports at 15 minutes, 50 a run made 160 MB a day, 100 a run makes about 88 MB (issue 23,
#: `benchmarks.event_log_day`); a run of 100 punctual exports is still ~10 CPU-s of work.
MAX_EXPORTS_PER_RUN: Final = 100
#: ...and at most this much expected work per run, in "window-days": a window of the regular
#: schedule weighs its share of a day (15 min = 1/96), a catch-up day weighs 1. A run that would
#: carry more is split, so exports catching up whole days (a fleet-wide outage: about 4 window-days
#: each with four datasets) go about 6 to a run, each run still a bounded amount of work.
MAX_WEIGHT_PER_RUN: Final = 24.0
#: Exports of one day are ordered by a stable hash into this many shards before they are cut into
#: runs, so a batch is mostly the same neighbours from tick to tick.
SHARDS: Final = 64

#: Key of the unfinished-attempt map: (export id, dataset).
Unfinished = Mapping[tuple[str, str], Window]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One export's due work on one day. ``run_key`` changes whenever the work would differ."""

    export_id: str
    account_id: str
    day: dt.date
    datasets: tuple[str, ...]
    run_key: str
    export_now: bool = False
    #: Expected work in window-days (see `MAX_WEIGHT_PER_RUN`).
    weight: float = 0.0


@dataclass(frozen=True, slots=True)
class Batch:
    """One run: exports of one day, at most `MAX_EXPORTS_PER_RUN` of them; ``shard`` numbers the run."""

    day: dt.date
    shard: int
    items: tuple[WorkItem, ...]

    @property
    def export_ids(self) -> tuple[str, ...]:
        return tuple(i.export_id for i in self.items)

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(sorted({d for i in self.items for d in i.datasets}))

    @property
    def run_key(self) -> str:
        """Stable for the same work: a crc of the items' own run keys (the full list would be long)."""
        digest = zlib.crc32("\n".join(i.run_key for i in self.items).encode())
        return f"{self.day.isoformat()}|s{self.shard}|n{len(self.items)}|{digest:08x}"


def waiting_for_backoff(export: ExportRecord, state: DatasetState, now_ms: int) -> bool:
    """True while the dataset waits out min(frequency × 2^(n−1), 6 h).

    "Export now" does not skip the wait here: pressing it lifts the wait once
    (`ExportStore.request_export_now`), so it makes ONE immediate attempt; if that attempt fails,
    its failure sets the next retry time and the normal backoff applies (it was re-run on every
    sensor tick while its request stayed pending, issue 22).
    """
    return state.next_retry_at is not None and now_ms < state.next_retry_at


def windows_due(export: ExportRecord, state: DatasetState, now_ms: int, unfinished: Window | None) -> list[Window]:
    """Due windows of an event dataset continuing the chain, starting with an unfinished attempt.

    ``unfinished`` is the latest uncommitted attempt that starts at the position. After a failure
    the backlog would otherwise merge it with the following grid steps into one catch-up window
    under a new name, and the parts it already wrote would stay next to it under the old one.
    Backoff is not applied here: the run writes what it was asked to (the sensor checks backoff).
    """
    horizon = now_ms - export.lag_ms
    start = state.position_ms
    head: list[Window] = []
    if unfinished is not None and unfinished.from_ms == start and unfinished.to_ms <= horizon:
        head, start = [unfinished], unfinished.to_ms
    pending = export.export_now_pending(state)
    return head + due_windows(start, now_ms, frequency=export.frequency, lag_ms=export.lag_ms, export_now=pending)


def snapshot_due(export: ExportRecord, state: DatasetState, now_ms: int) -> dt.date | None:
    """The day whose snapshot is due now (the position is that day's midnight), or ``None``."""
    return day_of(state.position_ms) if now_ms >= state.position_ms + DAY_MS + export.lag_ms else None


def owed_snapshot_day(state: DatasetState) -> dt.date | None:
    """The past snapshot day of the dataset's last error (a backfill or replace of it failed), or ``None``.

    Scheduled runs otherwise only take the day at the position, so nothing would finish that day
    (sim seed 5000: a replace overwrote the part, its ``_SUCCESS`` answered too late, and the ledger
    kept the old snapshot's rows). After the backoff it is due again, before the position's day;
    its error stays until it commits (`store.ledger`'s commit leaves another day's error alone).
    """
    window = state.last_error_window
    if not state.failures or window is None or window.to_ms > state.position_ms:
        return None
    return window.day


def due_day(export: ExportRecord, state: DatasetState, now_ms: int, unfinished: Window | None = None) -> dt.date | None:
    """The first UTC day on which this dataset has work due now (backoff applied), or ``None``."""
    due = _due(export, state, now_ms, unfinished)
    return None if due is None else due[0]


def _due(
    export: ExportRecord, state: DatasetState, now_ms: int, unfinished: Window | None
) -> tuple[dt.date, float] | None:
    """The first due day of one dataset and that day's expected work in window-days, or ``None``.

    One planning of the dataset's windows serves both (the sensor plans every export every tick:
    at 10,000 exports planning each dataset two or three times was a fifth of its CPU, issue 29).
    Windows never cross midnight, so those of the first day are the ones whose ``day`` is it.
    """
    if waiting_for_backoff(export, state, now_ms):
        return None
    if DATASETS[state.dataset].is_snapshot:
        day = owed_snapshot_day(state) or snapshot_due(export, state, now_ms)
        return None if day is None else (day, 1.0)
    windows = windows_due(export, state, now_ms, unfinished)
    if not windows:
        return None
    first = windows[0].day
    return first, sum(w.to_ms - w.from_ms for w in windows if w.day == first) / DAY_MS


def day_windows(
    export: ExportRecord,
    state: DatasetState,
    day: dt.date,
    now_ms: int,
    *,
    unfinished: Window | None = None,
    committed: Iterable[Window] = (),
) -> list[Window]:
    """The windows a run of (export, dataset, day) writes.

    Scheduled (``committed`` empty): the due windows of that day. A backfill passes the windows
    already committed on that day, which are re-delivered with the same bounds. Never anything
    before the dataset's start (``added_at``): a day before the export existed has nothing to write.

    Due windows are the chain's continuation from the position, so they are written only when the
    chain's next window is on that day: a backfill of a later day (the position waiting out a
    backoff on an earlier one) would commit windows ahead of it, and the scheduler, continuing
    from the position later, cut its catch-up over them (sim seed 10000855: rows twice).
    """
    chain = windows_due(export, state, now_ms, unfinished)
    due = [w for w in chain if w.day == day] if chain and chain[0].day == day else []
    kept = [w for w in committed if w.from_ms >= state.added_at]
    return sorted({*kept, *due})


def work_for(export: ExportRecord, now_ms: int, unfinished: Unfinished | None = None) -> WorkItem | None:
    """The next work of one export (its earliest due day), or ``None`` when nothing is due.

    Only the earliest day is planned: the next follows once this run has moved the positions, so a
    catch-up is a sequence of whole days, in order.
    """
    if export.status != ACTIVE:
        return None
    unfinished = unfinished or {}
    due = {s.dataset: _due(export, s, now_ms, unfinished.get((export.id, s.dataset))) for s in export.datasets}
    pending = [d[0] for d in due.values() if d is not None]
    if not pending:
        return None
    first = min(pending)
    chosen = [(s, d[1]) for s in export.datasets if (d := due[s.dataset]) is not None and d[0] == first]
    states = [s for s, _ in chosen]
    weight = 0.0
    for _, w in chosen:
        weight += w
    return WorkItem(
        export_id=export.id,
        account_id=export.account_id,
        day=first,
        datasets=tuple(s.dataset for s in states),
        run_key=run_key(export, first, states, now_ms),
        export_now=any(export.export_now_pending(s) for s in states),
        weight=weight,
    )


def run_key(export: ExportRecord, day: dt.date, states: Iterable[DatasetState], now_ms: int) -> str:
    """Export, day, config version, each dataset's position and failure count, and the relaunch slot.

    The config version moves on pause/resume, "export now" and any edit, so work canceled by a
    pause is requested again after the resume; positions and failure counts move with every
    committed or failed window, so finished work is never requested twice.
    """
    parts = ",".join(f"{s.dataset}@{s.position_ms}x{s.failures}" for s in states)
    return f"{export.id}|{day.isoformat()}|v{export.config_version}|{parts}|s{now_ms // RELAUNCH_SLOT_MS}"


def due_work(
    exports: Iterable[ExportRecord],
    now_ms: int,
    *,
    busy: Collection[str] = (),
    unfinished: Unfinished | None = None,
) -> list[WorkItem]:
    """Every export's due work this tick; exports in ``busy`` already have a run queued or running."""
    items = []
    for export in exports:
        if export.id in busy:
            continue
        item = work_for(export, now_ms, unfinished)
        if item is not None:
            items.append(item)
    return items


def shard_of(export_id: str, shards: int = SHARDS) -> int:
    return zlib.crc32(export_id.encode()) % shards


def batch(
    items: Iterable[WorkItem],
    *,
    max_exports: int = MAX_EXPORTS_PER_RUN,
    max_weight: float = MAX_WEIGHT_PER_RUN,
    shards: int = SHARDS,
) -> list[Batch]:
    """Group work into runs. The documented rule:

    1. one run never mixes days;
    2. a day's exports are ordered by (shard, export id), the shard a stable hash of the id, so the
       same exports share runs from tick to tick (and a slow one delays the same few);
    3. a run closes at ``max_exports`` exports or when the next export would carry it past
       ``max_weight`` window-days of expected work; an export heavier than that alone gets a run.
    So N punctual exports due together make ⌈N / max_exports⌉ runs.
    """
    by_day: dict[dt.date, list[WorkItem]] = defaultdict(list)
    for item in items:
        by_day[item.day].append(item)
    batches: list[Batch] = []
    for day, group in sorted(by_day.items()):
        current: list[WorkItem] = []
        weight = 0.0
        for item in sorted(group, key=lambda i: (shard_of(i.export_id, shards), i.export_id)):
            if current and (len(current) >= max_exports or weight + item.weight > max_weight):
                batches.append(Batch(day, len(batches), tuple(current)))
                current, weight = [], 0.0
            current.append(item)
            weight += item.weight
        if current:
            batches.append(Batch(day, len(batches), tuple(current)))
    return batches


def complete_through(state: DatasetState) -> dt.date:
    """The last UTC day whose folder this dataset of one export has finished.

    Events: every window up to the position is committed, so the day before the position's day is
    done (a position at midnight D+1 completes D). Snapshot: the position is the midnight of the
    next day to snapshot. Days before the dataset's start are vacuously done.
    """
    return day_of(state.position_ms) - dt.timedelta(days=1)


def dataset_complete_through(exports: Iterable[ExportRecord], dataset: str) -> dt.date | None:
    """The last day that every *active* export with this dataset has finished (``None``: none has it).

    Paused and deleted exports do not hold a day back: their status asset shows them instead.
    """
    # complete_through is monotone in the position: the earliest position gives the earliest day.
    positions = [s.position_ms for e in exports if e.status == ACTIVE for s in e.datasets if s.dataset == dataset]
    return day_of(min(positions)) - dt.timedelta(days=1) if positions else None
