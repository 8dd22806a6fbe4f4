"""Issue 26: server-side encryption and AWS roles per export.

``sse`` is AES256 (SSE-S3) or aws:kms (SSE-KMS, with ``kms_key_id``); NULL keeps the bucket's
default. ``role_arn`` is a role to assume instead of keys, with ``external_id``, which Sequenzy
generated for the export. ``external_ids`` holds the ids handed out by a role setup, until an export
takes one (``export_id``). None of these values is a secret.

Revision ID: 0010_peers
Revises: 0009_token_expiry
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_peers"
down_revision = "0009_token_expiry"


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(sa.Column("sse", sa.String(16)))
        batch.add_column(sa.Column("kms_key_id", sa.String(2048)))
        batch.add_column(sa.Column("role_arn", sa.String(2048)))
        batch.add_column(sa.Column("external_id", sa.String(64)))
    op.create_table(
        "external_ids",
        sa.Column("external_id", sa.String(64), primary_key=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("export_id", sa.String(40)),
    )
    op.create_index("ix_external_ids_account", "external_ids", ["account_id"])


def downgrade() -> None:
    op.drop_table("external_ids")
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("external_id")
        batch.drop_column("role_arn")
        batch.drop_column("kms_key_id")
        batch.drop_column("sse")
