"""API tokens: an optional expiry, and when each was last used (issue 24).

A token without ``expires_at`` never expires (as before). ``last_used_at`` is set by authentication,
at most once a minute per token, so operators can find and revoke tokens nobody uses.

Revision ID: 0009_token_expiry
Revises: 0008_export_format
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_token_expiry"
# Chains after 0008_export_format (this round: 0007_retention, 0008_export_format, 0009, 0010_peers).
down_revision = "0008_export_format"


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.BigInteger))
        batch.add_column(sa.Column("last_used_at", sa.BigInteger))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("expires_at")
