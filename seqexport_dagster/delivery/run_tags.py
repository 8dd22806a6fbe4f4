"""Run tags naming a run's exports and accounts, bounded whatever the number of exports (issue 23),
on every run that delivers: the scheduler's (`defs.sensors.run_tags`), and a run launched by hand
or by a backfill, which the run tags itself when it starts (`delivery.day_run`), so the Runs page
filters any account's runs the same way (issue 25)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from seqexport_dagster.delivery import planner

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

#: Run tags (issue 23: bounded whatever the number of exports in the run). A run of at most
#: `NAMED_IN_TAGS` exports names each (``export/<id>``); of at most `NAMED_IN_TAGS` accounts, each
#: (``account/<id>``). Every run carries ``shard/<n>`` for each export shard in it (`planner.shard_of`;
#: at most `planner.SHARDS`, usually one or two), which ``export_status`` shows per export, so the
#: Runs page filters any export's runs by its shard whatever the size of the batch.
EXPORT_TAG_PREFIX: Final = "export/"
ACCOUNT_TAG_PREFIX: Final = "account/"
SHARD_TAG_PREFIX: Final = "shard/"
EXPORTS_COUNT_TAG: Final = "seqexport/exports"
ACCOUNTS_COUNT_TAG: Final = "seqexport/accounts"
TAG_VALUE: Final = "yes"
NAMED_IN_TAGS: Final = 5


def tag_safe(value: str) -> str:
    """An id as a tag key segment (Dagster allows letters, digits, ``_.-`` and 63 characters)."""
    return _TAG_UNSAFE.sub("_", value)[:63]


def export_tag(export_id: str) -> str:
    return EXPORT_TAG_PREFIX + tag_safe(export_id)


def account_tag(account_id: str) -> str:
    return ACCOUNT_TAG_PREFIX + tag_safe(account_id)


def shard_tag(export_id: str) -> str:
    return f"{SHARD_TAG_PREFIX}{planner.shard_of(export_id)}"


def named_tags(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """For (export id, account id) pairs: the counts, each export and each account when there are at
    most `NAMED_IN_TAGS` of them, and every shard: at most 2 × `NAMED_IN_TAGS` + `planner.SHARDS` + 2."""
    found = sorted(set(pairs))
    exports = sorted({e for e, _ in found})
    accounts = sorted({a for _, a in found})
    tags = {EXPORTS_COUNT_TAG: str(len(exports)), ACCOUNTS_COUNT_TAG: str(len(accounts))}
    if len(exports) <= NAMED_IN_TAGS:
        tags |= {export_tag(e): TAG_VALUE for e in exports}
    if len(accounts) <= NAMED_IN_TAGS:
        tags |= {account_tag(a): TAG_VALUE for a in accounts}
    tags |= {shard_tag(e): TAG_VALUE for e in exports}
    return tags
