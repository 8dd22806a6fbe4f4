"""Run log: one row per (run, export, dataset) with its trigger, day and outcome (issue 17).

The windows ledger only knows runs that opened a window; the run log also holds runs canceled or
failed before writing anything, and how each run was started (schedule, export now, backfill, UI),
so the customer's history is complete and agrees with Dagster's run status.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
# Chains after 0005 (the HTTP API's tables), the last revision on main today; once 0003/0004 land
# the chain is 0002 -> 0003 -> 0004 -> 0005 -> 0006 and this line stays as it is.
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "run_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("export_id", sa.String(40), nullable=False),
        sa.Column("dataset", sa.String(32), nullable=False),
        sa.Column("date", sa.String(10), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text),
        sa.Column("started_at", sa.BigInteger, nullable=False),
        sa.Column("finished_at", sa.BigInteger),
    )
    op.create_index("ix_run_log_export_started", "run_log", ["export_id", "started_at"])
    op.create_index("ix_run_log_run", "run_log", ["run_id", "export_id", "dataset"])


def downgrade() -> None:
    op.drop_table("run_log")
