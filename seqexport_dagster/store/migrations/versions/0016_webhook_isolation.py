"""Issue 41: one account never slows another. Webhook endpoints get a circuit breaker (failures in a
row, when and why it was disabled); deliveries an index for the per-account pending cap; and
``rate_events`` counts rate-limited actions per account (webhook adds and tests, role setups).

Revision ID: 0016_webhook_isolation
Revises: 0015_manifest_chain
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_webhook_isolation"
down_revision = "0015_manifest_chain"


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(sa.Column("consecutive_failures", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("disabled_at", sa.BigInteger))
        batch.add_column(sa.Column("disabled_reason", sa.String(512)))
    op.create_index("ix_webhook_deliveries_account", "webhook_deliveries", ["account_id", "status"])
    op.create_table(
        "rate_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_rate_events_account", "rate_events", ["account_id", "action", "at"])


def downgrade() -> None:
    op.drop_table("rate_events")
    op.drop_index("ix_webhook_deliveries_account", table_name="webhook_deliveries")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("disabled_reason")
        batch.drop_column("disabled_at")
        batch.drop_column("consecutive_failures")
