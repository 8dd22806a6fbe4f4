"""Writer leases (one writer per export across batched runs) and the per-day totals index.

Revision ID: 0004
Revises: 0003 (0002 until issue 13 lands)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "export_leases",
        sa.Column("export_id", sa.String(40), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("claimed_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_windows_dataset_from", "windows", ["dataset", "from_ms"])
    op.create_index("ix_windows_finished", "windows", ["finished_at"])
    op.create_index("ix_windows_started", "windows", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_windows_started", table_name="windows")
    op.drop_index("ix_windows_finished", table_name="windows")
    op.drop_index("ix_windows_dataset_from", table_name="windows")
    op.drop_table("export_leases")
