"""Sim seed 10000617: a window's manifest re-sent with the chain start it was first sent with.

A manifest carries where the dataset's chain starts at its place (``chain_from_ms``). A backfill
that commits an earlier window between a manifest's send and its re-send (the answer lost, or the
commit failed) moved that start, so the re-send was other bytes under the same name: on a store
without preconditions it replaced the manifest. ``windows.manifest_through`` and
``windows.manifest_chain_from_ms`` record, before the PUT, which manifest an attempt sends and the
start it carries; a later attempt sending that name reuses the start. NULL on attempts that sent
none, and on every attempt before this migration (their re-sends compute the start as before).

Revision ID: 0015_manifest_chain
Revises: 0014_pending_body
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_manifest_chain"
down_revision = "0014_pending_body"


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("manifest_through", sa.Integer))
        batch.add_column(sa.Column("manifest_chain_from_ms", sa.BigInteger))


def downgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("manifest_chain_from_ms")
        batch.drop_column("manifest_through")
