"""HTTP API: hashed per-account tokens and Idempotency-Key results.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("account_id", sa.String(64)),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("revoked_at", sa.BigInteger),
    )
    op.create_index("ix_api_tokens_account", "api_tokens", ["account_id"])
    op.create_table(
        "idempotency_keys",
        sa.Column("caller", sa.String(80), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("operation", sa.String(128), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer),
        sa.Column("body", sa.Text),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_idempotency_keys_created", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_index("ix_api_tokens_account", table_name="api_tokens")
    op.drop_table("api_tokens")
