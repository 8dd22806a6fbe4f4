"""Window arithmetic (DESIGN §3): pure functions, property-tested."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqexport_dagster.contract.schema import TIMESTAMP_PATTERN
from seqexport_dagster.contract.window import (
    DAY_MS,
    DEFAULT_LAG_MS,
    FREQUENCIES,
    HOUR_MS,
    MINUTE_MS,
    Window,
    backoff_ms,
    chain,
    day_of,
    day_start_ms,
    due_windows,
    frequency_ms,
    grid_windows,
    iso_ms,
    parse_iso_ms,
)
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster_tests.support.world import DAY0

DATASET_NAMES = ("email_events", "sms_events", "custom_events")
# 2000-01-01 .. 2100-01-01: the range any export will live in.
instants = st.integers(min_value=946_684_800_000, max_value=4_102_444_800_000)
frequencies = st.sampled_from(sorted(FREQUENCIES))
lags = st.integers(min_value=0, max_value=30 * MINUTE_MS)


def _assert_chain(windows: list[Window], start: int) -> None:
    cursor = start
    for w in windows:
        assert w.from_ms == cursor, "each window starts at the previous to_ms"
        assert w.to_ms > w.from_ms
        assert day_of(w.from_ms) == day_of(w.to_ms - 1), "never crosses UTC midnight"
        assert w.to_ms - w.from_ms <= DAY_MS
        cursor = w.to_ms


@settings(max_examples=300)
@given(position=instants, ahead=st.integers(0, 10 * DAY_MS), frequency=frequencies, lag=lags, now=st.booleans())
def test_due_windows_chain_from_position_without_gap_overlap_or_midnight(
    position: int, ahead: int, frequency: str, lag: int, now: bool
) -> None:
    now_ms = position + ahead
    windows = due_windows(position, now_ms, frequency=frequency, lag_ms=lag, export_now=now)
    _assert_chain(windows, position)
    step = frequency_ms(frequency)
    for w in windows:
        assert now_ms >= w.to_ms + lag, "a window is due only once now >= to_ms + lag"
        assert w.day == day_of(w.from_ms)
        assert w.date_key == dt.datetime.fromtimestamp(w.from_ms / 1000, tz=dt.UTC).date().isoformat()
        if not now:
            # Scheduled windows end on the grid or at a midnight, which is on every grid.
            assert w.to_ms % step == 0
    if windows and not now:
        # Nothing due is left behind: the next grid end after the last window is not yet due.
        last = windows[-1].to_ms
        assert now_ms < last + step - last % step + lag
    if now:
        # Export now ends exactly at now - lag (if anything at all is due).
        assert (windows[-1].to_ms if windows else position) == max(position, now_ms - lag)


@given(position=instants, ahead=st.integers(0, 3 * DAY_MS), frequency=frequencies, lag=lags)
def test_chain_continues_across_ticks(position: int, ahead: int, frequency: str, lag: int) -> None:
    """Writing what is due at t1, then at t2, gives the same coverage as one tick at t2."""
    t1, t2 = position + ahead // 3, position + ahead
    first = due_windows(position, t1, frequency=frequency, lag_ms=lag)
    resume = first[-1].to_ms if first else position
    second = due_windows(resume, t2, frequency=frequency, lag_ms=lag)
    _assert_chain(first + second, position)
    once = due_windows(position, t2, frequency=frequency, lag_ms=lag)
    end = lambda ws: ws[-1].to_ms if ws else position  # noqa: E731
    assert end(first + second) == end(once)


def test_lag_boundary_exactly() -> None:
    position = DAY0
    to_ms = DAY0 + HOUR_MS
    lag = DEFAULT_LAG_MS
    assert due_windows(position, to_ms + lag - 1, frequency="1h") == []
    assert due_windows(position, to_ms + lag, frequency="1h") == [Window(DAY0, to_ms)]


def test_catch_up_merges_steps_up_to_midnight() -> None:
    position = DAY0 + 10 * HOUR_MS + 15 * MINUTE_MS
    now = DAY0 + 2 * DAY_MS + 5 * HOUR_MS + 7 * MINUTE_MS
    windows = due_windows(position, now, frequency="15m")
    assert windows == [
        Window(position, DAY0 + DAY_MS),
        Window(DAY0 + DAY_MS, DAY0 + 2 * DAY_MS),
        Window(DAY0 + 2 * DAY_MS, DAY0 + 2 * DAY_MS + 5 * HOUR_MS),
    ]


def test_export_now_ends_at_now_minus_lag() -> None:
    position = DAY0 + HOUR_MS
    now = DAY0 + HOUR_MS + 37 * MINUTE_MS + 123
    assert due_windows(position, now, frequency="1h") == []
    assert due_windows(position, now, frequency="1h", export_now=True) == [Window(position, now - DEFAULT_LAG_MS)]
    # And the schedule then continues from that off-grid point to the next grid end.
    later = due_windows(now - DEFAULT_LAG_MS, DAY0 + 2 * HOUR_MS + DEFAULT_LAG_MS, frequency="1h")
    assert later == [Window(now - DEFAULT_LAG_MS, DAY0 + 2 * HOUR_MS)]


def test_export_now_across_midnight_is_cut() -> None:
    position = DAY0 - HOUR_MS
    now = DAY0 + 30 * MINUTE_MS
    assert due_windows(position, now, frequency="1h", export_now=True) == [
        Window(position, DAY0),
        Window(DAY0, now - DEFAULT_LAG_MS),
    ]


@given(day=st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)), frequency=frequencies)
def test_grid_windows_tile_the_day(day: dt.date, frequency: str) -> None:
    windows = grid_windows(day, frequency)
    step = frequency_ms(frequency)
    start = day_start_ms(day)
    _assert_chain(windows, start)
    assert windows[-1].to_ms == start + DAY_MS
    assert len(windows) == DAY_MS // step
    assert all(w.from_ms % step == 0 and w.to_ms - w.from_ms == step for w in windows)
    assert {w.date_key for w in windows} == {day.isoformat()}


def test_window_bounds_and_midnight() -> None:
    w = Window(DAY0, DAY0 + HOUR_MS)
    assert not w.contains(DAY0) and w.contains(DAY0 + 1) and w.contains(DAY0 + HOUR_MS)
    assert not w.contains(DAY0 + HOUR_MS + 1)
    # The window that ends at midnight belongs to the day before: its date is the day of its start.
    assert Window(DAY0 - HOUR_MS, DAY0).date_key == "2026-09-29"
    assert Window(DAY0, DAY0 + DAY_MS).date_key == "2026-09-30"
    with pytest.raises(ValueError, match="crosses UTC midnight"):
        Window(DAY0 - 1, DAY0 + 1)
    with pytest.raises(ValueError, match="empty window"):
        Window(DAY0, DAY0)


@given(start=instants, length=st.integers(0, 5 * DAY_MS))
def test_chain_is_cut_only_at_midnight(start: int, length: int) -> None:
    windows = chain(start, start + length)
    _assert_chain(windows, start)
    assert (windows[-1].to_ms if windows else start) == start + length
    assert all(w.to_ms % DAY_MS == 0 for w in windows[:-1])


def test_backoff_sequence() -> None:
    m = MINUTE_MS
    got = [backoff_ms("15m", n) for n in range(1, 8)]
    assert got == [15 * m, 30 * m, 60 * m, 120 * m, 240 * m, 360 * m, 360 * m]
    assert [backoff_ms("1h", n) for n in range(1, 5)] == [HOUR_MS, 2 * HOUR_MS, 4 * HOUR_MS, 6 * HOUR_MS]
    assert backoff_ms("24h", 1) == 6 * HOUR_MS
    assert backoff_ms("1h", 0) == 0
    assert backoff_ms("15m", 10_000) == 6 * HOUR_MS


def test_frequency_ms_rejects_unknown() -> None:
    assert [frequency_ms(f) for f in ("15m", "1h", "6h", "24h")] == [
        15 * MINUTE_MS,
        HOUR_MS,
        6 * HOUR_MS,
        DAY_MS,
    ]
    with pytest.raises(InvalidInput) as err:
        frequency_ms("5m")
    assert err.value.field == "frequency" and "15m, 1h, 6h, 24h" in err.value.problem


@given(ms=instants | st.integers(min_value=-62_135_596_800_000, max_value=253_402_300_799_999))
def test_iso_ms_round_trip_and_fixed_width(ms: int) -> None:
    text = iso_ms(ms)
    assert len(text) == 24 and text.endswith("Z")
    assert parse_iso_ms(text) == ms


@given(a=instants, b=instants)
def test_iso_text_order_is_time_order(a: int, b: int) -> None:
    assert (iso_ms(a) < iso_ms(b)) == (a < b)


@pytest.mark.parametrize(
    ("year", "text"),
    [
        (1, "0001-01-01T00:00:00.000Z"),
        (999, "0999-12-31T23:59:59.999Z"),
        (1000, "1000-01-01T00:00:00.000Z"),
        (9999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_iso_ms_writes_four_digit_years(year: int, text: str) -> None:
    """Issue 47: ``strftime("%Y")`` gave ``1-01-01…`` and ``999-…`` on Linux."""
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert value.year == year
    ms = parse_iso_ms(text)
    assert iso_ms(ms) == text and len(text) == 24
    assert re.fullmatch(TIMESTAMP_PATTERN, iso_ms(ms))
