"""Reconciliation: find rows that appeared late inside committed windows and append them.

The window contract places a row by ``recorded_at``, and Sequenzy assigns ``recorded_at`` when it
writes the row, so a row normally lands in a window that is still open. It can land in a window that
is already exported only when its write becomes visible more than the lag (2 minutes) after the
time it carries: a transaction held open that long, a replica that far behind, a backfill by hand,
a clock step. The window then misses it.

This pass repairs that without replacing any file. The part ledger keeps, for every part, the ids it
carries; a recent committed window's ids in the source, minus the ids its *landed* parts carry (at
every location it was committed at), are exactly the rows not yet delivered, whatever else changed
(a window that lost one row and gained another still yields the new one). They go out as additional
parts of the same window, numbered on after its last part, in ``(recorded_at, id)`` order
(`Runner.write_window` with ``late_only``), at the export's current location: a window delivered
before a destination change keeps its parts at the old place (never written again) and continues
at the new one, numbered on after every part it has anywhere. Rows deleted since (a GDPR erasure)
are not un-delivered: nothing is ever deleted from the customer's bucket.

A part that never landed (still at ``intent``) delivers nothing: the pass comes back to its window,
and to the window of the dataset's last error, whatever their age while their ids are kept, and
re-sends it under its own name. Transient errors are retried in the run; until the window commits
the dataset keeps its error (`store.ledger`'s commit leaves an error about another window alone).

Cost: the ids are stored deflated in the ledger, about 5-9 bytes per row (benchmarks/), and pruned
once a window is older than any reconciliation looks back (`PRUNE_AFTER_MS`); each check reads the
window's ids from the source (one index range scan). Limits: windows whose ids were pruned, or that
were written before the part ledger existed, are not checked; a row that changes its ``recorded_at``
into another window is seen as new there (its id stays the deduplication key).

It never moves a position (the windows it appends to are behind it) and skips a dataset while it is
failing at its position, because a successful append would hide the error the customer must see.
Run it inside the export's own run (one run per export at a time), never beside one: every scheduled
run of an event asset does, after its due windows (`seqexport_dagster.defs.assets`).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.contract.schema import EVENT_DATASETS
from seqexport_dagster.contract.window import DAY_MS, Window, frequency_ms
from seqexport_dagster.delivery.batch import RETRY_DELAYS_S
from seqexport_dagster.delivery.delivered import holds_ids, missing_ids, newest_landed_attempt
from seqexport_dagster.delivery.planner import waiting_for_backoff
from seqexport_dagster.delivery.runner import Runner, WindowReport
from seqexport_dagster.delivery.table_moves import table_carry
from seqexport_dagster.errors import ExportError, RunInterrupted
from seqexport_dagster.source.reader import WINDOWS_PER_STATEMENT
from seqexport_dagster.store import ACTIVE, PRUNE_AFTER_MS, DatasetState, ExportRecord, PartRecord

DEFAULT_LOOKBACK_MS = DAY_MS
#: Whether scheduled passes thin the recheck with age (`rechecked_now`, issue 29). Scheduled runs and
#: the simulator both read this one switch. It was off from 2026-12-02 to 12-03: thinned, seed
#: 10000040 lost a late row, which turned out to be the `delivered.late_ids` hole of seed 10000163
#: (the row's window had its only part at ``intent`` after a replace and a move; old code owed it
#: nothing, fixed code owes the row), not the thinning. Until issue 39 it thinned by slot parity, which
#: held late rows back a day when runs did not land on every frequency slot (hourly runs of a 15-minute
#: export); it now counts recheck ages from the dataset's last complete pass, whatever the schedule.
THIN_SCHEDULED_RECHECK = True


@dataclass(frozen=True, slots=True)
class Reconciled:
    """One committed window that was checked for late rows."""

    dataset: str
    window: Window
    late_rows: int
    report: WindowReport | None  # set when rows were appended

    @property
    def changed(self) -> bool:
        return self.late_rows > 0


def lookback_for(export: ExportRecord, lateness_ms: int) -> int:
    """The lookback that lets the next scheduled run repair a row visible up to ``lateness_ms`` late.

    A row that becomes visible at V carries ``recorded_at`` >= V - lateness, and its window ends no
    earlier than that. The next scheduled run of the export starts about one frequency plus the lag
    after V; one more frequency covers a run that starts late (sensor tick, queue, a catch-up day).
    """
    return lateness_ms + 2 * frequency_ms(export.frequency) + export.lag_ms


def reconcile(
    runner: Runner,
    export_id: str,
    *,
    lookback_ms: int = DEFAULT_LOOKBACK_MS,
    lateness_ms: int | None = None,
    datasets: Iterable[str] | None = None,
    run_id: str | None = None,
    retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
    sleep: Callable[[float], None] | None = None,
    thin: bool = False,
) -> list[Reconciled]:
    """Check the committed windows of the last ``lookback_ms`` of recorded time; append late rows.

    ``lateness_ms``, when given, replaces ``lookback_ms`` by `lookback_for` the export (what the
    scheduled runs use: the cost then follows the export's frequency). Besides those windows, it
    always comes back to a window whose late rows have not all landed (a part at ``intent``, or
    the window named by the dataset's last error) or whose replace ended before its commit,
    however old, while the ledger has its ids.
    A transient error is retried after ``retry_delays_s`` like a normal window (`batch`); only
    the last attempt counts for the backoff. ``thin`` (scheduled runs, with ``lateness_ms``): recheck older
    windows only when their age reaches the next of `recheck_ages` since the dataset's last complete
    pass (`rechecked_now`), so a run's cost grows with the log of the lookback, not the lookback.
    Raises what `Runner.write_window` raises (an `ExportError`, or `RunInterrupted` on pause).
    """
    export = runner.store.get_export(export_id)
    if export.status != ACTIVE:
        return []
    if lateness_ms is not None:
        lookback_ms = lookback_for(export, lateness_ms)
    now = runner.clock()
    wanted = set(datasets) if datasets is not None else set(EVENT_DATASETS)
    results: list[Reconciled] = []
    for state in export.datasets:
        if state.dataset not in wanted or state.dataset not in EVENT_DATASETS or failing_ahead(state):
            continue
        if lateness_ms is not None and waiting_for_backoff(export, state, now):
            # A scheduled run carries every event dataset of the export; one whose late-row window
            # failed waits out its backoff like a due window (sim seed 10001810: retried 59 min
            # after its first failure, the wait being 60, because a neighbour's window was due).
            # Not marked reconciled, so the pass after the wait reaches back from the last one.
            continue
        since = since_for(export, state, now, lookback_ms, lateness_ms)
        # The ledger holds ids of windows ending after this (and of every window a pass still owes).
        kept = min(now - max(PRUNE_AFTER_MS, lookback_ms), since)
        runner.store.prune_part_ids(export_id, state.dataset, before_ms=kept)
        recent = runner.store.committed_since(export_id, state.dataset, since_ms=since, until_ms=state.position_ms)
        if thin and lateness_ms is not None:
            last_pass = state.reconciled_at
            recent = [w for w in recent if rechecked_now(export, w, now, last_pass, lateness_ms)]
        owed = {
            *runner.store.windows_awaiting_parts(
                export_id, state.dataset, export.location, state.position_ms, after_ms=kept
            ),
            *runner.store.windows_replace_unfinished(
                export_id, state.dataset, export.location, state.position_ms, after_ms=kept
            ),
        }
        if state.failures and state.last_error_window is not None:
            owed.add(state.last_error_window)  # a late-row window that failed: retried, whatever its age
        # With a table, windows whose part landed at a place the export left and never reached a
        # table there, or whose replace there did not finish, are looked at whatever their age
        # (`table_moves.table_carry` then decides). An export whose destination never changed has no
        # other place: no statement for it.
        elsewhere = (
            runner.store.windows_landed_elsewhere_unsettled(
                export_id, state.dataset, export.location, state.position_ms, after_ms=kept
            )
            if export.table is not None and export.destination_version > 1
            else []
        )
        checked = sorted({*recent, *owed, *elsewhere})
        # Read up front for a chunk of the pass's windows at a time, in a few statements instead of
        # a few per window (issue 29), and a chunk's ids only in memory at once (a manual pass may
        # reach back days). The pass holds the export's lease, and each window it writes touches
        # only its own parts, so nothing read here changes before its window's turn.
        for start in range(0, len(checked), WINDOWS_PER_STATEMENT):
            chunk = checked[start : start + WINDOWS_PER_STATEMENT]
            ledgers = runner.store.parts_of_windows(export_id, state.dataset, chunk, here=export.location)
            last_commits = runner.store.last_commits_of_windows(export_id, state.dataset, chunk, here=export.location)
            ledger_of = {w: [p for ps in found.values() for p in ps] for w, found in ledgers.items()}
            strands = _maybe_stranded(runner, export, state.dataset, chunk, ledgers) | set(elsewhere).intersection(
                chunk
            )
            in_source = runner.source.ids_of_windows(
                state.dataset, export.account_id, [w for w in chunk if holds_ids(ledger_of[w])]
            )
            for window in chunk:
                here = ledgers[window].get(export.location, [])
                late = missing_ids(in_source[window], ledger_of[window]) if window in in_source else set()
                settle = unsettled(here, last_commits.get(window))
                pending = any(not p.landed for p in here) or window in owed or settle
                if not (late or pending) and window in strands:
                    # Rows no table at a place the export left holds go into this table
                    # (`table_moves.table_carry`): the window's attempt here writes them.
                    pending = bool(
                        table_carry(runner.store, export, state.dataset, window, export.location, ledgers[window])
                    )
                report = (
                    _write(
                        runner, export_id, state.dataset, window, run_id, retry_delays_s, sleep, settle, export.location
                    )
                    if late or pending
                    else None
                )
                results.append(Reconciled(state.dataset, window, len(late), report))
        if lateness_ms is not None:
            runner.store.mark_reconciled(export_id, state.dataset, now)
    return results


def since_for(export: ExportRecord, state: DatasetState, now_ms: int, lookback_ms: int, lateness_ms: int | None) -> int:
    """Where a pass at ``now_ms`` starts checking committed windows (those ending after it).

    The lookback counts from the dataset's last complete scheduled pass (``reconciled_at``), not
    only from now: a row that became visible at V after that pass carries ``recorded_at`` >=
    V - lateness > reconciled_at - lateness, and every window that pass left unchecked (thinned:
    `rechecked_now`'s last recheck age is lateness + lag) ends after
    reconciled_at - lateness - lag. So however long the passes stopped (the export paused, the
    dataset failing at its position, a pass failing, a shorter frequency), the first complete
    pass after sees every such window. Before any complete pass the same holds from the dataset's
    ``added_at``, since every window was committed after it (sim seed 10000028: a day-long window
    committed by a run whose worker died before its pass, its late rows visible, then the export
    paused for most of a day and its frequency cut to 1h; counted from now, the first pass started
    after the window's end). That reach stops at `PRUNE_AFTER_MS` (or the lookback), where passes
    before ``reconciled_at`` existed dropped the ids. Manual passes (no ``lateness_ms``) keep their
    own lookback.
    """
    since = now_ms - lookback_ms
    if lateness_ms is None:
        return since
    if state.reconciled_at is None:
        return min(since, max(state.added_at - lateness_ms - export.lag_ms, now_ms - max(PRUNE_AFTER_MS, lookback_ms)))
    return min(since, state.reconciled_at - lateness_ms - export.lag_ms)


#: Each recheck age is this many times the one before (`recheck_ages`): a row that becomes visible at
#: age A is due for a recheck by age 1.5·A at the latest, so it is delivered at most about A/2 later.
RECHECK_RATIO: Final = 1.5


def young_age(export: ExportRecord) -> int:
    """Up to this age (twice "near": 2 frequencies plus the lag after a window's end, where nearly all
    late rows are) every scheduled run rechecks a committed window."""
    return 2 * (2 * frequency_ms(export.frequency) + export.lag_ms)


def recheck_ages(export: ExportRecord, lateness_ms: int) -> tuple[int, ...]:
    """The ages (time since a window's end) at which a committed window is due for a recheck.

    `young_age`, then each `RECHECK_RATIO` times the one before, and last the horizon itself
    (``lateness_ms`` plus the lag): a row visible within the horizon of its ``recorded_at`` is
    visible before its window reaches that age, so the last recheck sees every such row.
    """
    last = lateness_ms + export.lag_ms
    ages: list[int] = []
    age = young_age(export)
    while age < last:
        ages.append(age)
        age = math.ceil(age * RECHECK_RATIO)
    ages.append(last)
    return tuple(ages)


def rechecked_now(
    export: ExportRecord, window: Window, now_ms: int, last_pass_ms: int | None, lateness_ms: int
) -> bool:
    """Whether the scheduled pass starting at ``now_ms`` rechecks this committed window.

    ``last_pass_ms`` is the start of the dataset's last complete scheduled pass (``reconciled_at``),
    whatever happened between the two: runs on every frequency slot, once an hour, after a 6-hour
    backoff, a queue or a daemon down for a day. A window is rechecked by every pass while it is
    young (`young_age`), and by the first pass after its age reaches each of `recheck_ages`: the
    pass whose predecessor saw it younger than that age. Nothing here counts runs or slots.

    Completeness, for any schedule of passes. A row that becomes visible at time V in a committed
    window ``w`` is visible at an age A = V - w.to_ms no greater than the horizon. Let the row's due
    time be V itself when A <= young, else w.to_ms plus the smallest recheck age >= A (at most
    RECHECK_RATIO·A, and at most the horizon). Take the first complete pass starting at S >= due,
    and its predecessor P < S. If A <= young: either S - w.to_ms <= young (checked as young), or P < V
    gives P - w.to_ms < A <= young < S - w.to_ms, and young is a recheck age (checked). Else the due
    age lies in (P - w.to_ms, S - w.to_ms], since P < due <= S (checked). The pass reads the source
    after S, so it sees the row, and `since_for` reaches back past w (P - horizon < w.to_ms). A pass
    that skips the dataset (backoff, failing) or fails part-way records no ``reconciled_at``, so the
    next complete pass compares with the older P and checks a superset. A window committed after P
    was written from a source read after P, and the same argument holds from its commit. The
    argument takes the recheck ages as fixed; when the lookback or the frequency changes, a window
    may have passed its new ages unchecked, so every window the pass still reaches past the last
    age is checked too (`test_reconcile_dagster`: a lookback raised from 1 h to 3 h reaches back).

    Cost: a pass checks the young windows, for each recheck age the windows whose age crossed it
    since the last pass, and those past the last age it still reaches: at one pass per frequency,
    young/frequency + len(recheck_ages) + 2 windows (15 minutes, 24 h horizon: about 15 instead of
    98); under sparser passes more per pass, the same per hour.
    """
    if last_pass_ms is None or last_pass_ms >= now_ms:
        return True
    age = now_ms - window.to_ms
    ages = recheck_ages(export, lateness_ms)
    if age <= ages[0] or age > ages[-1]:
        # Past the last recheck age, a window the pass still reaches (`since_for`) is checked too:
        # the lookback's last two frequencies in the steady state, more after a gap or a change of
        # the lookback or the frequency, whose recheck ages the window may have passed unchecked.
        return True
    # The first recheck age the window had not reached at the last pass: due if reached by now.
    due = bisect.bisect_right(ages, last_pass_ms - window.to_ms)
    return due < len(ages) and ages[due] <= age


def unsettled(here: list[PartRecord], last_commit: int | None) -> bool:
    """Parts landed here under an attempt that never committed here (its worker died after the PUT,
    or its failure went unrecorded in a control-plane outage): `Runner.unsettled`, with the window's
    last commit here (None: never) read for a chunk of windows at once.

    Their rows count as delivered, so nothing else would come back to the window: without a commit
    the ledger's rows for this place stay short of the bucket's, and the window's newest manifest
    and its Delta table may not list them. One more attempt commits what is there (sim seeds 5000,
    40000144)."""
    newest = newest_landed_attempt(here)
    return bool(newest) and (last_commit is None or newest > last_commit)


def _maybe_stranded(
    runner: Runner,
    export: ExportRecord,
    dataset: str,
    chunk: Sequence[Window],
    ledgers: dict[Window, dict[str, list[PartRecord]]],
) -> set[Window]:
    """Windows of ``chunk`` with a part landed at another place under an attempt that no commit
    there followed: the few `table_moves.table_carry` then looks at closely (one statement per other
    place for the chunk, and only for an export that keeps a table)."""
    if export.table is None:
        return set()
    others = {place for found in ledgers.values() for place in found if place != export.location}
    out: set[Window] = set()
    for place in sorted(others):
        last = runner.store.last_commits_of_windows(export.id, dataset, chunk, here=place)
        for window, found in ledgers.items():
            newest = newest_landed_attempt(p for p in found.get(place, []) if p.rows)
            if newest and (window not in last or newest > last[window]):
                out.add(window)
    return out


def failing_ahead(state: DatasetState) -> bool:
    """The dataset is failing at its position (its due window), not on a window behind it: leave it
    to the due window's retry, so a success here does not hide that error."""
    if not state.failures:
        return False
    window = state.last_error_window
    return window is None or window.to_ms > state.position_ms


def _write(
    runner: Runner,
    export_id: str,
    dataset: str,
    window: Window,
    run_id: str | None,
    delays: Sequence[float],
    sleep: Callable[[float], None] | None,
    settle: bool = False,
    location: str | None = None,
) -> WindowReport:
    """`Runner.write_window` with in-run retries of transient errors (each re-sends what is owed).

    A try that failed after its late parts landed (the control plane lost at its commit) leaves
    them unsettled: the retry finds nothing more to send, so it must settle them, commit and write
    the manifest that lists them (simulator seed 2: it committed them without that manifest, and
    `verify` on the bucket alone found the part unlisted)."""
    for delay in delays:
        try:
            return runner.counting(False).write_window(
                export_id, dataset, window, run_id=run_id, late_only=True, settle=settle
            )
        except ExportError as exc:
            if not exc.retryable or isinstance(exc, RunInterrupted):
                raise
        (sleep or time.sleep)(delay)
        if not settle and location is not None:
            here = runner.store.window_parts(export_id, dataset, window, location)
            settle = runner.unsettled(export_id, dataset, window, location, newest_landed_attempt(here))
    return runner.counting(True).write_window(export_id, dataset, window, run_id=run_id, late_only=True, settle=settle)
