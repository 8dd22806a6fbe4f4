"""Why the scheduler requested nothing this tick, in words an operator can act on (issue 17).

Pure, like `seqexport_dagster.delivery.planner`: the sensor shows the result as the tick's skip reason, so
the Dagster UI says who is in backoff and until when, who is paused, and when the next window is
due, instead of only "0 runs requested". `seqexport status` has each export's full detail.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, Window, floor_to_grid, frequency_ms, iso_ms
from seqexport_dagster.delivery.planner import waiting_for_backoff
from seqexport_dagster.store import ACTIVE, PAUSED, DatasetState, ExportRecord


def next_scheduled(record: ExportRecord, state: DatasetState) -> tuple[Window, int]:
    """The dataset's next scheduled window (or snapshot day) and when it is written (end + lag)."""
    if DATASETS[state.dataset].is_snapshot:
        window = Window(state.position_ms, state.position_ms + DAY_MS)
    else:
        step = frequency_ms(record.frequency)
        window = Window(state.position_ms, floor_to_grid(state.position_ms, step) + step)
    return window, window.to_ms + record.lag_ms


def retry_note(state: DatasetState) -> str:
    """``retries at 2026-09-30T14:00:00.000Z (attempt 3)``: when the scheduler tries again."""
    when = iso_ms(state.next_retry_at) if state.next_retry_at is not None else "the next tick"
    return f"retries at {when} (attempt {state.failures + 1})"


def _when(ms: int, now_ms: int) -> str:
    """``03:15Z`` today, ``12-07 03:15Z`` on another day."""
    text = iso_ms(ms)
    return text[11:16] + "Z" if text[:10] == iso_ms(now_ms)[:10] else f"{text[5:10]} {text[11:16]}Z"


def _accounts(accounts: list[str], shown: int = 3) -> str:
    unique = sorted(set(accounts))
    more = f" +{len(unique) - shown}" if len(unique) > shown else ""
    return ", ".join(unique[:shown]) + more


def idle_headline(exports: Iterable[ExportRecord], now_ms: int, *, busy: Collection[str] = ()) -> str:
    """Why a tick requested nothing, in one short line that names accounts, what needs an operator
    first (issue 42: Dagster's tick list cut a long reason in the middle, and it named no account).
    ``backoff: acme (retry 03:15Z); paused: globex; next due 03:00Z``."""
    records = list(exports)
    backoff: list[str] = []
    retry: int | None = None
    next_due: int | None = None
    for e in records:
        if e.status != ACTIVE or e.id in busy:
            continue
        for s in e.datasets:
            if waiting_for_backoff(e, s, now_ms):
                backoff.append(e.account_id)
                at = s.next_retry_at if s.next_retry_at is not None else now_ms
                retry = at if retry is None else min(retry, at)
                continue
            due = next_scheduled(e, s)[1]
            next_due = due if next_due is None else min(next_due, due)
    parts = []
    if backoff:
        parts.append(f"backoff: {_accounts(backoff)} (retry {_when(retry or now_ms, now_ms)})")
    paused = [e.account_id for e in records if e.status == PAUSED]
    if paused:
        parts.append(f"paused: {_accounts(paused)}")
    running = [e.account_id for e in records if e.status == ACTIVE and e.id in busy]
    if running:
        parts.append(f"running: {_accounts(running)}")
    if next_due is not None:
        parts.append(f"next due {_when(next_due, now_ms)}")
    elif not records:
        parts.append("no exports")
    elif not parts:
        parts.append("nothing due")
    return "; ".join(parts)
