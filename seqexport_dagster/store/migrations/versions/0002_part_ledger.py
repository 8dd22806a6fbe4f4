"""Part ledger for write-once delivery: one row per part number, with intent/landed, boundary and ids.

Revision ID: 0002
Revises: 0001

Parts recorded before this revision have no boundary and no ids. Rows of one part number written
by several attempts collapse into the newest one, marked landed (the old runner rewrote the same
names, so the newest record describes the object). A window left unfinished by the old runner has
no boundaries to resume from: the new runner finishes it the old way, by rewriting from part 0000
(it needs overwrite rights once). Late-row detection skips windows without ids; they leave its
lookback within a day of the upgrade.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

_NUMBER = ["export_id", "dataset", "from_ms", "to_ms", "location", "part"]


def upgrade() -> None:
    with op.batch_alter_table("parts") as batch:
        batch.add_column(sa.Column("status", sa.String(8), nullable=False, server_default="landed"))
        batch.add_column(sa.Column("kind", sa.String(8), nullable=False, server_default="range"))
        batch.add_column(sa.Column("last_recorded_at", sa.String(24)))
        batch.add_column(sa.Column("last_id", sa.String(256)))
        batch.add_column(sa.Column("md5", sa.String(24)))
        batch.add_column(sa.Column("ids", sa.LargeBinary))
        batch.add_column(sa.Column("landed_at", sa.BigInteger))
    keep = sa.text("DELETE FROM parts WHERE id NOT IN (SELECT max(id) FROM parts GROUP BY " + ", ".join(_NUMBER) + ")")
    op.execute(keep)
    # "legacy": no boundary and no ids. The runner finishes such an unfinished window the old way.
    op.execute(sa.text("UPDATE parts SET landed_at = written_at, kind = 'legacy'"))
    op.create_index("ux_parts_number", "parts", _NUMBER, unique=True)


def downgrade() -> None:
    op.drop_index("ux_parts_number", "parts")
    with op.batch_alter_table("parts") as batch:
        for name in ("landed_at", "ids", "md5", "last_id", "last_recorded_at", "kind", "status"):
            batch.drop_column(name)
