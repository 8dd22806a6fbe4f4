"""Issue 26: server-side encryption per export.

``sse`` is AES256 (SSE-S3) or aws:kms (SSE-KMS, with ``kms_key_id``); NULL keeps the bucket's
default. Neither value is a secret.

Revision ID: 0010_peers
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_peers"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(sa.Column("sse", sa.String(16)))
        batch.add_column(sa.Column("kms_key_id", sa.String(2048)))


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("kms_key_id")
        batch.drop_column("sse")
