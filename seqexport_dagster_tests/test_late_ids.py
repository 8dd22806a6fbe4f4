"""`delivered.late_ids`: which source ids of a window no landed part carries (issue 22).

Unit tests with a fake source (the ids of one window); the simulator's seed 10000163 is the end to
end case: a replace whose only part's upload timed out, then a move, and the retry at the new place
committed the window empty because a window without a landed part counted as "no ids kept".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from seqexport_dagster.contract.window import HOUR_MS, Window
from seqexport_dagster.delivery.delivered import late_ids
from seqexport_dagster.delivery.writer import pack_ids
from seqexport_dagster.store import PART_INTENT, PART_LANDED, RANGE_PART, PartRecord

WINDOW = Window(0, HOUR_MS)
SOURCE_IDS = ["eev_1", "eev_2", "eev_3"]


class WindowSource:
    """The source as `late_ids` reads it: the ids of the window, in one batch."""

    def ids(self, dataset: str, account_id: str, window: Window | None) -> Iterator[list[str]]:
        assert (dataset, account_id, window) == ("email_events", "acme", WINDOW)
        yield list(SOURCE_IDS)


class Export:
    account_id = "acme"


def part(number: int, status: str, ids: list[str] | None) -> PartRecord:
    return PartRecord(
        number=number,
        key=f"email_events/part-{number:04d}.jsonl.gz",
        kind=RANGE_PART,
        status=status,
        last=None,
        rows=len(ids or []),
        size=1,
        md5="0" * 32,
        ids=None if ids is None else pack_ids(ids),
    )


def late(ledger: list[PartRecord]) -> set[str]:
    export: Any = Export()
    source: Any = WindowSource()
    return late_ids(source, export, "email_events", WINDOW, ledger)


def test_a_window_whose_only_part_never_landed_owes_every_row() -> None:
    assert late([part(0, PART_INTENT, SOURCE_IDS)]) == set(SOURCE_IDS)


def test_ids_of_a_part_at_intent_are_owed_beside_a_landed_part() -> None:
    ledger = [part(0, PART_LANDED, ["eev_1"]), part(1, PART_INTENT, ["eev_2", "eev_3"])]
    assert late(ledger) == {"eev_2", "eev_3"}


def test_a_window_whose_landed_parts_carry_every_row_owes_nothing() -> None:
    assert late([part(0, PART_LANDED, ["eev_1", "eev_2"]), part(1, PART_LANDED, ["eev_3"])]) == set()


def test_a_window_with_no_part_or_with_pruned_ids_is_not_checked() -> None:
    assert late([]) == set()
    assert late([part(0, PART_LANDED, None), part(1, PART_INTENT, ["eev_2"])]) == set()
