"""Issue 29: a partial index of the window attempts that are not committed.

The scheduler sensor asks every tick which (export, dataset) has an unfinished attempt at its
position (`store.fleet.unfinished_attempts`). Through ``ix_windows_export_dataset_from`` that was
one index probe per export and dataset, 40,000 at 10,000 exports (0.4-0.7 s of the tick's wall
time on PostgreSQL); committed attempts, nearly all of them, cannot be the answer, so the index
holds only the others and the query reads just those.

Revision ID: 0013_tick29
Revises: 0012_simfix
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_tick29"
down_revision = "0012_simfix"

OPEN = sa.text("status <> 'committed'")


def upgrade() -> None:
    op.create_index(
        "ix_windows_open",
        "windows",
        ["export_id", "dataset", "from_ms"],
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_windows_open", table_name="windows")
