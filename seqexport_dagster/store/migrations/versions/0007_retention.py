"""Retention (issue 23): per-day summaries of compacted windows, parts and run-log entries;
the redundant ix_parts_lookup goes (ux_parts_number has the same leading columns) and parts get an
index on window_id (compaction deletes window rows, each checked against parts' foreign key).

An existing instance keeps its whole history through this upgrade: nothing is compacted here. The
first `seqexport maintain` (or the ``control_plane_maintenance`` schedule) folds the days older
than the retention horizon into ``window_days``, a few days' worth per transaction.

Revision ID: 0007_retention
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_retention"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "window_days",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("export_id", sa.String(40), nullable=False),
        sa.Column("dataset", sa.String(32), nullable=False),
        sa.Column("date", sa.String(10), nullable=False),
        sa.Column("location", sa.String(32), nullable=False),
        sa.Column("first_from_ms", sa.BigInteger),
        sa.Column("last_to_ms", sa.BigInteger),
        sa.Column("windows", sa.Integer, nullable=False, server_default="0"),
        sa.Column("bounds", sa.Text),
        sa.Column("parts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("rows", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("md5_digest", sa.String(64), nullable=False, server_default=""),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
        sa.Column("compacted_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ux_window_days_key", "window_days", ["export_id", "dataset", "date", "location"], unique=True)
    op.create_index("ix_window_days_dataset_date", "window_days", ["dataset", "date"])
    # ux_parts_number (export, dataset, from, to, location, part) serves every lookup this one did.
    op.drop_index("ix_parts_lookup", table_name="parts")
    # Compaction deletes window rows: without this, each one's foreign-key check scans all parts.
    op.create_index("ix_parts_window", "parts", ["window_id"])


def downgrade() -> None:
    op.drop_index("ix_parts_window", table_name="parts")
    op.create_index("ix_parts_lookup", "parts", ["export_id", "dataset", "from_ms", "to_ms", "location"])
    op.drop_table("window_days")
