"""Issue 26: webhooks per account: endpoints (secrets sealed), the event outbox, deliveries and
their attempts (the delivery log). Nothing existing changes.

Revision ID: 0011_webhooks
Revises: 0010_peers
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_webhooks"
down_revision = "0010_peers"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.String(512), nullable=False, server_default="*"),
        sa.Column("description", sa.String(256), nullable=False, server_default=""),
        sa.Column("failing_after", sa.Integer, nullable=False, server_default="3"),
        sa.Column("secret_ciphertext", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("deleted_at", sa.BigInteger),
    )
    op.create_index("ix_webhook_endpoints_account", "webhook_endpoints", ["account_id"])
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("export_id", sa.String(40)),
        sa.Column("dedup_key", sa.String(200)),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ux_webhook_events_dedup", "webhook_events", ["dedup_key"], unique=True)
    op.create_index("ix_webhook_events_created", "webhook_events", ["created_at"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(40), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("finished_at", sa.BigInteger),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_endpoint", "webhook_deliveries", ["endpoint_id", "id"])
    op.create_index("ix_webhook_deliveries_created", "webhook_deliveries", ["created_at"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("delivery_id", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("attempted_at", sa.BigInteger, nullable=False),
        sa.Column("status_code", sa.Integer),
        sa.Column("error", sa.String(512)),
        sa.Column("duration_ms", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_webhook_attempts_delivery", "webhook_attempts", ["delivery_id", "attempt"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_events")
    op.drop_table("webhook_endpoints")
