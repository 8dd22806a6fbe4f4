"""Initial control plane: exports, datasets, windows ledger, parts ledger.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "exports",
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
        sa.Column("config_version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("destination_version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("export_now_at", sa.BigInteger),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("deleted_at", sa.BigInteger),
    )
    op.create_table(
        "export_datasets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("export_id", sa.String(40), sa.ForeignKey("exports.id"), nullable=False),
        sa.Column("dataset", sa.String(32), nullable=False),
        sa.Column("added_at", sa.BigInteger, nullable=False),
        sa.Column("removed_at", sa.BigInteger),
        sa.Column("position_ms", sa.BigInteger, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_retry_at", sa.BigInteger),
        sa.Column("last_error", sa.Text),
        sa.Column("last_error_at", sa.BigInteger),
        sa.Column("last_error_from_ms", sa.BigInteger),
        sa.Column("last_error_to_ms", sa.BigInteger),
    )
    op.create_index("ix_export_datasets_export", "export_datasets", ["export_id", "dataset"])
    op.create_table(
        "windows",
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
    )
    op.create_index("ix_windows_export_dataset_from", "windows", ["export_id", "dataset", "from_ms"])
    op.create_index("ix_windows_export_started", "windows", ["export_id", "started_at"])
    op.create_table(
        "parts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("window_id", sa.Integer, sa.ForeignKey("windows.id"), nullable=False),
        sa.Column("export_id", sa.String(40), nullable=False),
        sa.Column("dataset", sa.String(32), nullable=False),
        sa.Column("from_ms", sa.BigInteger, nullable=False),
        sa.Column("to_ms", sa.BigInteger, nullable=False),
        sa.Column("location", sa.String(32), nullable=False),
        sa.Column("part", sa.Integer, nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("written_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_parts_lookup", "parts", ["export_id", "dataset", "from_ms", "to_ms", "location"])
