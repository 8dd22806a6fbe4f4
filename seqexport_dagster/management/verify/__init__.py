"""`seqexport verify`: the customer's proof that a bucket holds everything, exactly once.

Runs on the customer's side with their own read key (List and Get are fine here; the exporter itself
only ever PUTs). It re-derives every guarantee of the bucket contract from the objects alone:

- windows of each event dataset chain without a gap or an overlap, and sit in their day's folder;
- parts of a window or a snapshot are numbered 0000.. without holes;
- each part is valid gzip with at most 50,000 lines of JSON, each row of the published schema
  (every field, in order, with the right type);
- rows are ordered by ``(recorded_at, id)`` (snapshots: by ``id``) and inside their window;
- no id appears twice (events: per dataset; snapshots: per day), with every place it appears;
- each snapshot day has an empty ``_SUCCESS`` written no earlier than any of its parts.

Optionally the rows of every window are compared with the control-plane ledger (operators only).
Problems are aggregated per object (one "3 rows outside the window" rather than three entries) so a
badly broken bucket still gives a readable report.
"""

from __future__ import annotations

from seqexport_dagster.management.verify.bucket import Bucket, LocalBucket, S3Bucket, StoredObject, open_bucket
from seqexport_dagster.management.verify.checks import MAX_LOCATIONS, verify_bucket, verify_location
from seqexport_dagster.management.verify.report import DatasetSummary, Problem, VerifyReport
from seqexport_dagster.management.verify.row import row_problem

__all__ = [
    "MAX_LOCATIONS",
    "Bucket",
    "DatasetSummary",
    "LocalBucket",
    "Problem",
    "S3Bucket",
    "StoredObject",
    "VerifyReport",
    "open_bucket",
    "row_problem",
    "verify_bucket",
    "verify_location",
]
