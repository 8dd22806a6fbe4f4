"""An export whose bucket does not exist on the loopback moto server: every run of it fails with a
customer-readable reason ("bucket … does not exist") and a retry, the way a deleted bucket does."""

from __future__ import annotations

import uuid

from seqexport_dagster.contract.window import MINUTE_MS
from seqexport_dagster.destination import DestinationConfig
from seqexport_dagster.store import ControlPlane, ExportRecord


def missing_bucket_export(
    store: ControlPlane, endpoint: str, *, now_ms: int, access_key_id: str, secret_access_key: str
) -> ExportRecord:
    """An hourly export of email_events created at ``now_ms``, for account acme."""
    return store.create_export(
        account_id="acme",
        destination=DestinationConfig(
            "s3",
            f"missing-{uuid.uuid4().hex[:12]}",
            prefix="sequenzy",
            region="us-east-1",
            endpoint=endpoint,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        ),
        datasets=("email_events",),
        frequency="1h",
        lag_ms=2 * MINUTE_MS,
        now_ms=now_ms,
    )
