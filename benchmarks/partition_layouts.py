"""The two partitionings compared by `benchmarks.partition_health`, as asset specs for a webserver.

``SEQEXPORT_BENCH_LAYOUT=old``: ``email_events`` partitioned export × date (the first mapping).
``SEQEXPORT_BENCH_LAYOUT=new``: ``email_events`` by UTC day (``defs/partitions.days_partitions``),
and ``export_status`` by export (``defs/partitions.exports_partitions``), as in this project.
The range is two years ending today, so every day the benchmark writes is a valid partition.
"""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg

from seqexport_dagster.defs.health import STATUS_ASSET, STATUS_CHECK
from seqexport_dagster.defs.partitions import days_partitions, exports_partitions

DAYS = 730


def first_day() -> dt.date:
    return dt.datetime.now(tz=dt.UTC).date() - dt.timedelta(days=DAYS - 1)


@dg.definitions
def defs() -> dg.Definitions:
    days = days_partitions(first_day())
    if os.environ.get("SEQEXPORT_BENCH_LAYOUT") == "old":
        old = dg.MultiPartitionsDefinition({"date": days, "export": exports_partitions})
        return dg.Definitions(assets=[dg.AssetSpec("email_events", partitions_def=old)])
    return dg.Definitions(
        assets=[
            dg.AssetSpec("email_events", partitions_def=days),
            dg.AssetSpec(STATUS_ASSET, partitions_def=exports_partitions),
        ],
        asset_checks=[_status_check],
    )


@dg.multi_asset_check(specs=[dg.AssetCheckSpec(STATUS_CHECK, asset=STATUS_ASSET)])
def _status_check() -> dg.AssetCheckResult:
    """Declared as ``defs.export_status`` declares it, so the page shows its check; never run here."""
    raise NotImplementedError("the benchmark's webserver only serves pages")
