"""Delivery: what runs an export's windows and snapshots into its bucket, exactly once.

The middle layer: it drives the control plane (`seqexport_dagster.store`), the source and the
destinations, which know nothing of it, and is driven by management and the front ends above it.
`planner` and `idle` decide what is due; `runner` commits a window or a snapshot, `attempt` writes
its parts (`writer`, `parquet_writer`, `part_writers`, `delivered`, `manifest`); `batch`,
`backfill` and `reconcile` run many; `webhook_dispatch` tells the customer's endpoints;
`settings` and `assembly` open every part from the environment, once.
"""
