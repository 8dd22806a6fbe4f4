"""The one partitioning shared by the four assets: export × UTC day.

``date`` is the same day as the bucket's ``date=`` folder. ``export`` is dynamic, one key per export
id, registered by the scheduler sensor, so adding an export needs no code reload. ``end_offset=1``
makes today a valid partition: runs write today's windows while the day is still open.
"""

from __future__ import annotations

from typing import Final

import dagster as dg

DATE: Final = "date"
EXPORT: Final = "export"
FIRST_DAY: Final = "2025-01-01"

exports_partitions = dg.DynamicPartitionsDefinition(name="exports")
days_partitions = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, timezone="UTC", end_offset=1)
export_days = dg.MultiPartitionsDefinition({DATE: days_partitions, EXPORT: exports_partitions})


def partition_key(export_id: str, day: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({DATE: day, EXPORT: export_id})
