"""Partitions: dataset assets by UTC day only; the status asset by export only.

``days(first)`` is the same day as the bucket's ``date=`` folder. It starts at the first export's
first day (days before any export are not partitions) and ``end_offset=1`` makes today a valid
partition: runs write today's windows while the day is still open. 3,000 exports with two years
of history are 730 partitions per dataset asset, not 2.2 million.

``exports`` is dynamic, one key per export, ``<account>/<export id>`` (`status_partition`),
registered by the scheduler sensor, so adding an export needs no code reload; only the status
asset uses it (N partitions). Keys registered before issue 42 were bare export ids: the sensor
registers each export's named key and removes its bare one (`defs.sensors`).
"""

from __future__ import annotations

import datetime as dt
from typing import Final

import dagster as dg

#: Used only when the control plane cannot be read while the code location loads.
FALLBACK_FIRST_DAY: Final = dt.date(2025, 1, 1)
EXPORTS: Final = "exports"

exports_partitions = dg.DynamicPartitionsDefinition(name=EXPORTS)


def days_partitions(first_day: dt.date) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=first_day.isoformat(), timezone="UTC", end_offset=1)


def status_partition(account_id: str, export_id: str) -> str:
    """An export's key on ``export_status``: ``<account>/<export id>``, so that the Partitions tab
    names each export's account and groups an account's exports (issue 42). Account ids are
    letters, digits, '_', '.' and '-' (`contract.validation`), never a '/'."""
    return f"{account_id}/{export_id}"


def export_id_of(partition_key: str) -> str:
    """The export id of a status partition key; a bare export id (the keys before issue 42) is its
    own. The one place that maps a key back to an export."""
    return partition_key.rsplit("/", 1)[-1]
