"""Each export's file format: ``jsonl.gz`` (the default, every existing export) or ``parquet``.

Revision ID: 0008_export_format
Revises: 0007_retention
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_export_format"
down_revision = "0007_retention"


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(sa.Column("format", sa.String(16), nullable=False, server_default="jsonl.gz"))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("format")
