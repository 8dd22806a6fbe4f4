"""Issue 22 (simulator findings): when each event dataset's reconciliation last completed, and
which window attempts were an operator's replace.

``reconciled_at`` is the start of the last scheduled reconciliation pass that checked every window
of the dataset without an error. The next pass reaches back from there, not only from its own
start, so a pause, a dataset failing at its position or a shorter frequency never lets a window
leave the recheck before a pass has seen its late rows (`seqexport_dagster.delivery.reconcile`). NULL (every
dataset before this migration, a dataset just added): the pass looks back from its own start.

``windows.replacing`` marks an attempt that overwrote the window's parts (an operator's replace):
if it ends before its commit, the next attempt at that place writes the window's manifest as the
replace would have, since the manifest already there under that name describes the old parts.

Revision ID: 0012_simfix
Revises: 0011_webhooks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_simfix"
down_revision = "0011_webhooks"


def upgrade() -> None:
    with op.batch_alter_table("export_datasets") as batch:
        batch.add_column(sa.Column("reconciled_at", sa.BigInteger))
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("replacing", sa.Boolean))


def downgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("replacing")
    with op.batch_alter_table("export_datasets") as batch:
        batch.drop_column("reconciled_at")
