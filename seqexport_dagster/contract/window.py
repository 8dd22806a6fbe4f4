"""Time as a value: windows of recorded time, the frequency grid and days.

Every function here is pure. A window is ``(from_ms, to_ms]`` in epoch milliseconds UTC, never
crosses UTC midnight, and lives in the ``date=`` folder of the UTC day of its start. The object keys
built from windows live in `seqexport_dagster.contract.keys`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from seqexport_dagster.errors import InvalidInput

MINUTE_MS: Final = 60_000
HOUR_MS: Final = 60 * MINUTE_MS
DAY_MS: Final = 24 * HOUR_MS
DEFAULT_LAG_MS: Final = 2 * MINUTE_MS
MAX_BACKOFF_MS: Final = 6 * HOUR_MS

#: Accepted export frequencies. Each divides a day, so the grid restarts cleanly at UTC midnight.
FREQUENCIES: Final[dict[str, int]] = {
    "15m": 15 * MINUTE_MS,
    "1h": HOUR_MS,
    "6h": 6 * HOUR_MS,
    "24h": DAY_MS,
}
DEFAULT_FREQUENCY: Final = "1h"


def frequency_ms(frequency: str) -> int:
    """Milliseconds of a frequency name; raises `InvalidInput` naming the accepted values."""
    try:
        return FREQUENCIES[frequency]
    except KeyError:
        accepted = ", ".join(FREQUENCIES)
        raise InvalidInput("frequency", f"{frequency!r} is not one of {accepted}") from None


def day_start(ms: int) -> int:
    return ms - ms % DAY_MS


def next_midnight(ms: int) -> int:
    """The first UTC midnight strictly after ``ms``."""
    return day_start(ms) + DAY_MS


def floor_to_grid(ms: int, step_ms: int) -> int:
    """The latest grid point at or before ``ms``. The grid is counted from UTC midnight."""
    return ms - ms % step_ms


_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def day_of(ms: int) -> dt.date:
    """The UTC day of ``ms``: POSIX time has no leap seconds, so it is whole days since the epoch
    (the same as ``datetime.fromtimestamp(ms // 1000, UTC).date()``, half its cost: the
    sensor takes ~100,000 a tick at 10,000 exports)."""
    return dt.date.fromordinal(_EPOCH_ORDINAL + ms // DAY_MS)


def date_key(day: dt.date) -> str:
    return day.isoformat()


def parse_date_key(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text) if len(text) == 10 else _bad_date(text)
    except ValueError:
        return _bad_date(text)


def _bad_date(text: str) -> dt.date:
    raise InvalidInput("date", f"{text!r} is not a day in the form YYYY-MM-DD")


def day_start_ms(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 1000


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def iso_ms(ms: int) -> str:
    """``2026-09-30T12:34:56.789Z``: the one timestamp format of the published schemas, and the
    one helper that writes it. The year always has four digits (``0001``, ``0999``): ``strftime("%Y")``
    gives ``1`` and ``999`` on Linux (glibc does not pad), which is not the schema's pattern and
    broke both the text's fixed width and its order (issue 47). Years 1..9999, as Python, Arrow
    and the warehouses hold them."""
    t = _EPOCH + dt.timedelta(milliseconds=ms)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond // 1000:03d}Z"
    )


def parse_iso_ms(text: str) -> int:
    """Inverse of `iso_ms`; accepts any ISO-8601 instant with an offset."""
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    return int(value.timestamp() * 1000 + (0.5 if value.timestamp() >= 0 else -0.5))


@dataclass(frozen=True, order=True, slots=True)
class Window:
    """Recorded time ``(from_ms, to_ms]``; never crosses UTC midnight."""

    from_ms: int
    to_ms: int

    def __post_init__(self) -> None:
        if self.to_ms <= self.from_ms:
            raise ValueError(f"empty window ({self.from_ms}, {self.to_ms}]")
        if self.to_ms > next_midnight(self.from_ms):
            raise ValueError(f"window ({self.from_ms}, {self.to_ms}] crosses UTC midnight")

    @property
    def day(self) -> dt.date:
        return day_of(self.from_ms)

    @property
    def date_key(self) -> str:
        return date_key(self.day)

    @classmethod
    def whole_day(cls, day: dt.date) -> Window:
        """The whole UTC day: how the ledger records a subscriber snapshot."""
        start = day_start_ms(day)
        return cls(start, start + DAY_MS)

    def contains(self, recorded_ms: int) -> bool:
        return self.from_ms < recorded_ms <= self.to_ms

    def __str__(self) -> str:
        return f"({iso_ms(self.from_ms)}, {iso_ms(self.to_ms)}]"


def chain(start_ms: int, end_ms: int) -> list[Window]:
    """Windows from ``start_ms`` to ``end_ms``, cut only at UTC midnights (catch-up windows)."""
    windows: list[Window] = []
    while start_ms < end_ms:
        to_ms = min(next_midnight(start_ms), end_ms)
        windows.append(Window(start_ms, to_ms))
        start_ms = to_ms
    return windows


def due_windows(
    position_ms: int, now_ms: int, *, frequency: str, lag_ms: int = DEFAULT_LAG_MS, export_now: bool = False
) -> list[Window]:
    """The windows that may be written now, continuing the chain at ``position_ms``.

    A window is due only once ``now >= to_ms + lag``. Scheduled windows end on the frequency grid;
    "export now" may end one at ``now - lag``. After a pause or outage the backlog is covered by
    catch-up windows of at most one day (cut at midnight) rather than one window per grid step.
    """
    horizon = now_ms - lag_ms
    end = horizon if export_now else floor_to_grid(horizon, frequency_ms(frequency))
    return chain(position_ms, end)


def grid_windows(day: dt.date, frequency: str) -> list[Window]:
    """The frequency grid of one whole day: what a backfill writes for a day never exported."""
    start = day_start_ms(day)
    step = frequency_ms(frequency)
    return [Window(t, t + step) for t in range(start, start + DAY_MS, step)]


def backoff_ms(frequency: str, failures: int) -> int:
    """Wait after the ``failures``-th consecutive failure: min(frequency × 2^(n−1), 6 h)."""
    if failures <= 0:
        return 0
    delay: int = frequency_ms(frequency) * 2 ** min(failures - 1, 40)
    return min(delay, MAX_BACKOFF_MS)
