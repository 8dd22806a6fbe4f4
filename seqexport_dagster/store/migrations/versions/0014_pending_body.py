"""Sim seed 10000040: the bytes of a snapshot part sent to a store without preconditions, kept
until it lands.

A part whose outcome is unknown is sent again under its name, and without a create-only
precondition that re-send reaches the object if it had landed: it must be the same bytes. Event
rows do not change, so their parts are cut again identically; a subscriber's row does (updated
between the send and the re-send), so its snapshot part could not be. ``parts.pending_body`` holds
those bytes while the part is at ``intent`` and is cleared when it lands (NULL everywhere else).

Revision ID: 0014_pending_body
Revises: 0013_tick29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_pending_body"
down_revision = "0013_tick29"


def upgrade() -> None:
    with op.batch_alter_table("parts") as batch:
        batch.add_column(sa.Column("pending_body", sa.LargeBinary))


def downgrade() -> None:
    with op.batch_alter_table("parts") as batch:
        batch.drop_column("pending_body")
