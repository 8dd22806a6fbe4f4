"""Which committed windows of an export live at the location being verified (for `verify --ledger`).

After a destination change (bucket, prefix, endpoint) the ledger holds windows committed at several
places. Only the windows whose latest committed attempt is at the verified place belong there; the
others must not be reported missing. The ledger keeps a fingerprint of each place
(`store.location_of`), so the verified source is matched by recomputing that fingerprint for the
ways the source can be spelled (provider, endpoint, bucket/prefix split).

Days older than the retention horizon are compacted (`store.compaction`): their windows live on in
per-day summaries (`store.window_days`), one per location, and are placed the same way.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import sqlalchemy as sa

from seqexport_dagster.store import ControlPlane, location_of
from seqexport_dagster.store.tables import windows
from seqexport_dagster.store.window_days import WindowDay, read_window_days


def source_locations(source: str, endpoints: set[str | None]) -> set[str]:
    """Every fingerprint the verified ``source`` may carry in the ledger."""
    match = re.match(r"^(s3|gs|az)://([^/]+)/?(.*)$", source)
    if match:
        bucket, prefix = match.group(2), match.group(3).strip("/")
        providers = ("azure",) if match.group(1) == "az" else ("s3", "gcs")
        return {location_of(p, e, bucket, prefix) for p in providers for e in endpoints | {None}}
    parts = PurePosixPath(source.removeprefix("file://")).parts
    return {
        location_of("local", None, str(PurePosixPath(*parts[:cut])), "/".join(parts[cut:]))
        for cut in range(1, len(parts) + 1)
    }


def compacted_days(store: ControlPlane, export_id: str, source: str) -> tuple[list[WindowDay], list[WindowDay]]:
    """(every summary of the export, those at ``source``): all of them when ``source`` is not
    recognised (no window was ever committed there), so that everything is compared."""
    if not isinstance(store, ControlPlane):
        return [], []
    days = [d for d in read_window_days(store.engine, export_id) if d.windows]
    here = source_locations(source, {store.get_export(export_id).endpoint})
    ours = [d for d in days if d.location in here]
    if ours:
        return days, ours
    return days, [] if attempted_at(store, export_id, here) else days


def attempted_at(store: ControlPlane, export_id: str, places: set[str]) -> bool:
    """Whether any attempt of the export (committed or not) was made at one of ``places``: the place
    is then recognised. One whose attempts have all failed so far holds no committed window; taken
    for an unknown place, it would be held to every window committed anywhere (sim seed 10000132:
    a replace at a new place that failed after landing a part of an earlier day)."""
    with store.engine.connect() as conn:
        found = conn.execute(
            sa.select(windows.c.id)
            .where(windows.c.export_id == export_id, windows.c.location.in_(sorted(places)))
            .limit(1)
        ).first()
    return found is not None
