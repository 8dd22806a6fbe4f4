"""Control-plane tables. Changes go through a new Alembic revision in ``store/migrations``.

All times are epoch milliseconds UTC (BIGINT), like window bounds.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

metadata = sa.MetaData()

exports = sa.Table(
    "exports",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("account_id", sa.String(64), nullable=False, index=True),
    sa.Column("provider", sa.String(16), nullable=False),
    sa.Column("bucket", sa.String(1024), nullable=False),
    sa.Column("region", sa.String(64)),
    sa.Column("endpoint", sa.String(512)),
    sa.Column("prefix", sa.String(512), nullable=False, server_default=""),
    sa.Column("access_key_id", sa.String(256)),
    sa.Column("secret_ciphertext", sa.Text),
    sa.Column("frequency", sa.String(8), nullable=False),
    sa.Column("lag_ms", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    # Bumped on every change; destination_version only when bucket, prefix, endpoint or keys change.
    sa.Column("config_version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("destination_version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("export_now_at", sa.BigInteger),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("deleted_at", sa.BigInteger),
    # jsonl.gz or parquet (migration 0008); a change applies from the next window (`file_format`).
    sa.Column("format", sa.String(16), nullable=False, server_default="jsonl.gz"),
    # Issue 26 (migration 0010_peers): server-side encryption on every PutObject; not secrets.
    sa.Column("sse", sa.String(16)),
    sa.Column("kms_key_id", sa.String(2048)),
    # A role to assume instead of keys, with the external id Sequenzy generated for this export.
    sa.Column("role_arn", sa.String(2048)),
    sa.Column("external_id", sa.String(64)),
    # Issue 44 (migration 0017_delta_tables): "delta" keeps a Delta Lake log per dataset; None: files only.
    sa.Column("table_format", sa.String(16)),
)

# External ids handed out by a role setup (issue 26, migration 0010_peers); ``export_id`` once an
# export took one. Only an id generated here for the same account is accepted with a role.
external_ids = sa.Table(
    "external_ids",
    metadata,
    sa.Column("external_id", sa.String(64), primary_key=True),
    sa.Column("account_id", sa.String(64), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("export_id", sa.String(40)),
    sa.Index("ix_external_ids_account", "account_id"),
)

export_datasets = sa.Table(
    "export_datasets",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("export_id", sa.String(40), sa.ForeignKey("exports.id"), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("added_at", sa.BigInteger, nullable=False),
    sa.Column("removed_at", sa.BigInteger),
    # Events: to_ms of the last committed window. Snapshot: start of the next day to snapshot.
    sa.Column("position_ms", sa.BigInteger, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_retry_at", sa.BigInteger),
    sa.Column("last_error", sa.Text),
    sa.Column("last_error_at", sa.BigInteger),
    sa.Column("last_error_from_ms", sa.BigInteger),
    sa.Column("last_error_to_ms", sa.BigInteger),
    # Events (migration 0012_simfix): start of the last scheduled reconciliation pass that checked
    # every window of the dataset; the next pass reaches back from there (`reconcile`).
    sa.Column("reconciled_at", sa.BigInteger),
    sa.Index("ix_export_datasets_export", "export_id", "dataset"),
)

windows = sa.Table(
    "windows",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("export_id", sa.String(40), sa.ForeignKey("exports.id"), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("date", sa.String(10), nullable=False),
    sa.Column("from_ms", sa.BigInteger, nullable=False),
    sa.Column("to_ms", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Column("location", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("parts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger),
    sa.Column("snapshot_taken_at", sa.BigInteger),
    # An operator's replace overwrote parts in this attempt (migration 0012_simfix; `runner`).
    sa.Column("replacing", sa.Boolean),
    # The manifest this attempt sends (its last part, ``through-NNNN``) and the chain start it
    # carries, recorded before its PUT: a re-send under that name by a later attempt carries the
    # same start, so it is the same bytes (migration 0015; `manifest`, sim seed 10000617).
    sa.Column("manifest_through", sa.Integer),
    sa.Column("manifest_chain_from_ms", sa.BigInteger),
    sa.Index("ix_windows_export_dataset_from", "export_id", "dataset", "from_ms"),
    sa.Index("ix_windows_export_started", "export_id", "started_at"),
)

parts = sa.Table(
    "parts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("window_id", sa.Integer, sa.ForeignKey("windows.id"), nullable=False),
    sa.Column("export_id", sa.String(40), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("from_ms", sa.BigInteger, nullable=False),
    sa.Column("to_ms", sa.BigInteger, nullable=False),
    # Fingerprint of where the part physically is (provider, endpoint, bucket, prefix), not the key.
    sa.Column("location", sa.String(32), nullable=False),
    sa.Column("part", sa.Integer, nullable=False),
    sa.Column("key", sa.String(1024), nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("written_at", sa.BigInteger, nullable=False),
    # The part ledger of write-once delivery (runner.py): one row per part number per location.
    # "intent" is recorded before the PUT, "landed" after a 2xx (or a 412: it was already there).
    sa.Column("status", sa.String(8), nullable=False, server_default="landed"),
    # "range": rows after the previous range part's boundary up to this one's. "late": rows that
    # appeared inside the window after its range parts landed (reconciliation), chosen by id.
    # "legacy": recorded before the part ledger existed (migration 0002): no boundary, no ids.
    sa.Column("kind", sa.String(8), nullable=False, server_default="range"),
    # The boundary: the last row's sort key, (recorded_at, id) for events, id for the snapshot.
    # NULL on parts recorded before the part ledger existed (migration 0002).
    sa.Column("last_recorded_at", sa.String(24)),
    sa.Column("last_id", sa.String(256)),
    sa.Column("md5", sa.String(24)),
    # The ids the part carries, newline-joined and deflated: what late-row detection compares the
    # source against. Pruned (set NULL) once the window is older than any reconciliation looks.
    sa.Column("ids", sa.LargeBinary),
    sa.Column("landed_at", sa.BigInteger),
    # The bytes of a snapshot part at intent on a store without preconditions: its re-send must be
    # the same bytes, and the subscribers' rows may have changed since (migration 0014; `delivery.attempt`).
    sa.Column("pending_body", sa.LargeBinary),
    # A window's parts are looked up along ux_parts_number's leading columns (ix_parts_lookup, the
    # same columns without ``part``, was dropped in migration 0007_retention: it only cost bytes).
    sa.Index("ux_parts_number", "export_id", "dataset", "from_ms", "to_ms", "location", "part", unique=True),
    # The parts of window attempts (compaction), and the foreign-key check when a window row goes.
    sa.Index("ix_parts_window", "window_id"),
)
#: The part ledger as its records read it: every column but the pending bytes (read only to re-send).
part_record_columns = tuple(c for c in parts.c if c.name != "pending_body")

# HTTP API (migration 0005): tokens are stored as a SHA-256 of a 256-bit random value, never in clear.
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),  # the printable prefix, e.g. sqx_3f9a1c2b7d4e
    sa.Column("account_id", sa.String(64)),  # NULL for the operator scope
    sa.Column("scope", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("name", sa.String(128), nullable=False, server_default=""),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger),
    sa.Column("expires_at", sa.BigInteger),  # NULL: never expires (migration 0009_token_expiry)
    sa.Column("last_used_at", sa.BigInteger),  # set by authentication, at most once a minute
    sa.Index("ix_api_tokens_account", "account_id"),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("caller", sa.String(80), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("operation", sa.String(128), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("status_code", sa.Integer),  # NULL while the first request is still being answered
    sa.Column("body", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ix_idempotency_keys_created", "created_at"),
)

# Issue 14 (migration 0004): at most one writer per export, across runs, UI launches and backfills.
export_leases = sa.Table(
    "export_leases",
    metadata,
    sa.Column("export_id", sa.String(40), primary_key=True),
    sa.Column("holder", sa.String(128), nullable=False),
    sa.Column("claimed_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
)
#: The sensor's per-day totals of one dataset (issue 14, migration 0004).
windows_dataset_from = sa.Index("ix_windows_dataset_from", windows.c.dataset, windows.c.from_ms)
#: The sensor's "which exports changed since the last tick" (issue 14, migration 0004).
windows_finished = sa.Index("ix_windows_finished", windows.c.finished_at)
windows_started = sa.Index("ix_windows_started", windows.c.started_at)
#: The sensor's unfinished attempt at each position (issue 29, migration 0013_tick29): only the
#: attempts that are not committed, a small part of the ledger.
WINDOW_OPEN: Final = sa.text("status <> 'committed'")
windows_open = sa.Index(
    "ix_windows_open",
    windows.c.export_id,
    windows.c.dataset,
    windows.c.from_ms,
    postgresql_where=WINDOW_OPEN,
    sqlite_where=WINDOW_OPEN,
)

# One row per connection test (create, destination change), for the per-account rate limit
# (`seqexport_dagster.store.rate_limit`). Rows older than the limit's window are deleted as it goes.
connection_tests = sa.Table(
    "connection_tests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account_id", sa.String(64), nullable=False),
    sa.Column("tested_at", sa.BigInteger, nullable=False),
    sa.Index("ix_connection_tests_account", "account_id", "tested_at"),
)

# How each run was started and how it ended, per (run, export, dataset) (migration 0006;
# `seqexport_dagster.store.run_log`).
run_log = sa.Table(
    "run_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("export_id", sa.String(40), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("date", sa.String(10), nullable=False),
    sa.Column("trigger", sa.String(16), nullable=False),
    # running, succeeded, failed, canceled: the words Dagster's run page uses.
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("message", sa.Text),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger),
    sa.Index("ix_run_log_export_started", "export_id", "started_at"),
    sa.Index("ix_run_log_run", "run_id", "export_id", "dataset"),
)

# Retention (migration 0007_retention; `seqexport_dagster.store.compaction`): the windows, parts and
# run-log entries of a day wholly older than the retention horizon, folded into one row per
# (export, dataset, day, location). ``location`` is "" for a day whose run-log entries wrote nothing.
window_days = sa.Table(
    "window_days",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("export_id", sa.String(40), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("date", sa.String(10), nullable=False),
    sa.Column("location", sa.String(32), nullable=False),
    # The windows whose latest committed attempt is at this location: first and last bounds, count,
    # and every window's bounds only when they are not one even chain from first to last.
    sa.Column("first_from_ms", sa.BigInteger),
    sa.Column("last_to_ms", sa.BigInteger),
    sa.Column("windows", sa.Integer, nullable=False, server_default="0"),
    sa.Column("bounds", sa.Text),
    sa.Column("parts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("rows", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
    # SHA-256 over "from_ms-to_ms/part:md5" of the landed parts, sorted, one per line.
    sa.Column("md5_digest", sa.String(64), nullable=False, server_default=""),
    # Every window attempt (any status) and run-log entry folded in.
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("compacted_at", sa.BigInteger, nullable=False),
    sa.Index("ux_window_days_key", "export_id", "dataset", "date", "location", unique=True),
    sa.Index("ix_window_days_dataset_date", "dataset", "date"),
)

# Webhooks per account (issue 26, migration 0011_webhooks; `seqexport_dagster.store.webhooks`).
# An endpoint's secret is sealed like a bucket secret (`SecretBox`), bound to the endpoint's id,
# URL and account; ``events`` is a comma-separated list of event types, or "*".
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("account_id", sa.String(64), nullable=False),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("events", sa.String(512), nullable=False, server_default="*"),
    sa.Column("description", sa.String(256), nullable=False, server_default=""),
    # export.failing goes to this endpoint when a dataset's consecutive failures reach this count.
    sa.Column("failing_after", sa.Integer, nullable=False, server_default="3"),
    sa.Column("secret_ciphertext", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("deleted_at", sa.BigInteger),
    # The circuit breaker (issue 41, migration 0016): failed attempts in a row, whatever the
    # delivery; at `webhook_dispatch.BREAKER_FAILURES` the endpoint is disabled until its customer
    # enables it again. Pending deliveries wait meanwhile (within the account's pending cap).
    sa.Column("consecutive_failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("disabled_at", sa.BigInteger),
    sa.Column("disabled_reason", sa.String(512)),
    sa.Index("ix_webhook_endpoints_account", "account_id"),
)

# The outbox: one row per event, written in the transaction of the state change it reports.
# ``dedup_key`` makes an event that must happen once (a dataset-day completing) unique.
webhook_events = sa.Table(
    "webhook_events",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("account_id", sa.String(64), nullable=False),
    sa.Column("type", sa.String(64), nullable=False),
    sa.Column("export_id", sa.String(40)),
    sa.Column("dedup_key", sa.String(200)),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ux_webhook_events_dedup", "dedup_key", unique=True),
    sa.Index("ix_webhook_events_created", "created_at"),
)

# One row per (event, endpoint): fanned out with the event, in the same transaction.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(40), nullable=False),
    sa.Column("endpoint_id", sa.String(40), nullable=False),
    sa.Column("account_id", sa.String(64), nullable=False),
    # pending, delivered, failed (attempts used up), canceled (endpoint removed)
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger),
    # The dispatcher's query: pending deliveries due now, oldest first.
    sa.Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    sa.Index("ix_webhook_deliveries_endpoint", "endpoint_id", "id"),
    sa.Index("ix_webhook_deliveries_created", "created_at"),
    # The account's pending count, read by every emit (the per-account cap, migration 0016).
    sa.Index("ix_webhook_deliveries_account", "account_id", "status"),
)

# One row per rate-limited action of an account (a webhook added or tested, a role setup; issue 41,
# migration 0016), for `rate_limit.admit`. Rows older than the action's window go as it counts.
rate_events = sa.Table(
    "rate_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("account_id", sa.String(64), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Index("ix_rate_events_account", "account_id", "action", "at"),
)

# The delivery log: every attempt, with its answer's status code or the error (never the secret).
webhook_attempts = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("delivery_id", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("attempted_at", sa.BigInteger, nullable=False),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.String(512)),
    sa.Column("duration_ms", sa.Integer, nullable=False, server_default="0"),
    sa.Index("ix_webhook_attempts_delivery", "delivery_id", "attempt"),
)

# Issue 44 (migration 0017): each (export, dataset, location)'s Delta log as written (`store.table_log`).
table_commits = sa.Table(
    "table_commits",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("export_id", sa.String(40), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("location", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("txn", sa.BigInteger, nullable=False),
    sa.Column("key", sa.String(1024), nullable=False),
    sa.Column("body", sa.LargeBinary),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("landed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("export_id", "dataset", "location", "version", name="uq_table_commits_version"),
)

# The table's files: per path, what its latest ``add`` said and whether a ``remove`` followed.
table_files = sa.Table(
    "table_files",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("export_id", sa.String(40), nullable=False),
    sa.Column("dataset", sa.String(32), nullable=False),
    sa.Column("location", sa.String(32), nullable=False),
    sa.Column("from_ms", sa.BigInteger, nullable=False),
    sa.Column("to_ms", sa.BigInteger, nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("md5", sa.String(32)),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("removed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.UniqueConstraint("export_id", "dataset", "location", "path", name="uq_table_files_path"),
    sa.Index("ix_table_files_window", "export_id", "dataset", "location", "from_ms", "to_ms"),
)
