"""Issue 44: a Delta Lake table per dataset. ``exports.table_format`` ("delta" or none), and the log
the exporter wrote per (export, dataset, location): ``table_commits`` (versions, bodies until they
land) and ``table_files`` (what each path's latest ``add`` said, for checkpoints and `verify`).

Revision ID: 0017_delta_tables
Revises: 0016_webhook_isolation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_delta_tables"
down_revision = "0016_webhook_isolation"


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(sa.Column("table_format", sa.String(16)))
    op.create_table(
        "table_commits",
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
    op.create_table(
        "table_files",
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
    )
    op.create_index("ix_table_files_window", "table_files", ["export_id", "dataset", "location", "from_ms", "to_ms"])


def downgrade() -> None:
    op.drop_index("ix_table_files_window", table_name="table_files")
    op.drop_table("table_files")
    op.drop_table("table_commits")
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("table_format")
