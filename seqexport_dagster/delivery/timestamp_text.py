"""The contract's timestamp text (``YYYY-MM-DDTHH:MM:SS.sssZ``) to epoch milliseconds over whole
columns in NumPy: one arithmetic for both Parquet paths, rows (`parquet_writer._timestamps`) and Arrow
batches (`arrow_check`), so a part re-cut from the other path holds the same values. NumPy only: no
``pyarrow.compute`` (+8 MB resident in a worker, measured) and no Python object per value.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def civil_fields(text: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
    """Year, month, day, hour, minute, second and millisecond (int64 columns) of timestamps in the
    contract's form, one a row of ``text`` (n × 24 ASCII bytes); the digits are not checked here."""
    n = len(text)

    def number(start: int, end: int) -> np.ndarray[Any, Any]:
        value = np.zeros(n, dtype=np.int64)
        for at in range(start, end):
            value = value * 10 + (text[:, at] - 48)
        return value

    return number(0, 4), number(5, 7), number(8, 10), number(11, 13), number(14, 16), number(17, 19), number(20, 23)


def epoch_millis(*fields: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Milliseconds since the epoch of proleptic Gregorian fields (`civil_fields`)."""
    year, month, day, hour, minute, second, milli = fields
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    year = year - (month <= 2)
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    days = era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
    millis: np.ndarray[Any, Any] = (((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + milli
    return millis
