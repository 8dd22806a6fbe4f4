"""Object keys (DESIGN §4): exactly the contract's names, and `parse_key` reads back what we write."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqexport_dagster.contract.file_format import FORMATS, FileFormat, format_of_key, window_format
from seqexport_dagster.contract.keys import (
    ParsedKey,
    connection_test_key,
    parse_key,
    part_key,
    snapshot_part_key,
    success_key,
)
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window, day_of, day_start_ms
from seqexport_dagster_tests.support.world import DAY0

DATASET_NAMES = ("email_events", "sms_events", "custom_events")
# 2000-01-01 .. 2100-01-01: the range any export will live in.
instants = st.integers(min_value=946_684_800_000, max_value=4_102_444_800_000)


def test_keys_exactly_as_contract() -> None:
    w = Window(DAY0, DAY0 + HOUR_MS)
    day = dt.date(2026, 9, 30)
    assert (
        part_key("sequenzy", "email_events", w, 0)
        == "sequenzy/email_events/date=2026-09-30/email_events-1790726400000-1790730000000-0000.jsonl.gz"
    )
    assert (
        part_key("", "sms_events", w, 12)
        == "sms_events/date=2026-09-30/sms_events-1790726400000-1790730000000-0012.jsonl.gz"
    )
    assert part_key("a/b", "custom_events", w, 1).startswith("a/b/custom_events/date=2026-09-30/custom_events-")
    assert snapshot_part_key("sequenzy", day, 0) == "sequenzy/subscribers/date=2026-09-30/subscribers-0000.jsonl.gz"
    assert success_key("sequenzy", day) == "sequenzy/subscribers/date=2026-09-30/_SUCCESS"
    assert success_key("", day) == "subscribers/date=2026-09-30/_SUCCESS"
    assert connection_test_key("sequenzy", "abc") == "sequenzy/_sequenzy/connection-test-abc.txt"
    assert parse_key("_sequenzy/connection-test-abc.txt") is None
    assert (
        part_key("sequenzy", "email_events", w, 3, "parquet")
        == "sequenzy/email_events/date=2026-09-30/email_events-1790726400000-1790730000000-0003.parquet"
    )
    assert snapshot_part_key("s", day, 0, "parquet") == "s/subscribers/date=2026-09-30/subscribers-0000.parquet"


def test_a_window_keeps_the_format_of_the_parts_it_has() -> None:
    w = Window(DAY0, DAY0 + HOUR_MS)
    jsonl = [part_key("p", "email_events", w, n) for n in range(2)]
    assert window_format(jsonl, "parquet") == "jsonl.gz"
    assert window_format([part_key("p", "email_events", w, 0, "parquet")], "jsonl.gz") == "parquet"
    assert window_format([], "parquet") == "parquet"
    assert format_of_key("p/_sequenzy/connection-test-x.txt") is None


@given(
    fmt=st.sampled_from(FORMATS),
    dataset=st.sampled_from(DATASET_NAMES),
    start=instants,
    length=st.integers(1, DAY_MS),
    part=st.integers(0, 9999),
)
def test_parse_key_round_trip(fmt: FileFormat, dataset: str, start: int, length: int, part: int) -> None:
    window = Window(start, min(start + length, day_start_ms(day_of(start)) + DAY_MS))
    key = part_key("", dataset, window, part, fmt)
    assert parse_key(key) == ParsedKey(dataset, window.date_key, window, part, format=fmt)
    assert parse_key("p/" + key) is None, "parse_key takes keys relative to the prefix"


@given(
    fmt=st.sampled_from(FORMATS),
    day=st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)),
    part=st.integers(0, 9999),
)
def test_parse_snapshot_keys_round_trip(fmt: FileFormat, day: dt.date, part: int) -> None:
    assert parse_key(snapshot_part_key("", day, part, fmt)) == ParsedKey(
        "subscribers", day.isoformat(), None, part, format=fmt
    )
    assert parse_key(success_key("", day)) == ParsedKey("subscribers", day.isoformat(), None, None, is_success=True)


@pytest.mark.parametrize(
    "key",
    [
        "email_events/date=2026-09-30/sms_events-1790726400000-1790730000000-0000.jsonl.gz",
        "email_events/date=2026-09-30/email_events-1790726400000-1790730000000-0000.json.gz",
        "email_events/date=2026-09-30/email_events-1790730000000-1790726400000-0000.jsonl.gz",
        "email_events/date=2026-09-30/email_events-1790726400000-1790730000000-00000.jsonl.gz",
        "email_events/date=2026-09-30/_SUCCESS",
        "subscribers/date=2026-09-30/subscribers-1.jsonl.gz",
        "email_events/date=2026-09-30/email_events-1790726400000-1790730000000-0000.parquet.gz",
        "subscribers/date=2026-09-30/subscribers-0000.jsonl.parquet",
    ],
)
def test_parse_key_rejects_names_we_never_write(key: str) -> None:
    assert parse_key(key) is None


def test_parse_key_exposes_a_wrong_date_folder() -> None:
    """A part in the wrong date= folder parses, so `verify` can name the problem (wrong_folder)."""
    parsed = parse_key("email_events/date=2026-10-01/email_events-1790726400000-1790730000000-0000.jsonl.gz")
    assert parsed is not None and parsed.window is not None
    assert parsed.date == "2026-10-01" and parsed.window.date_key == "2026-09-30"
