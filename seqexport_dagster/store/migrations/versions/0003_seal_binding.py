"""Seal binding and connection-test rate limit.

Re-seals every stored secret from format v1 (associated data: the export id) to v2 (export id,
provider, endpoint, bucket, access key id), with the keys `ControlPlane.migrate` passes in. A row
that does not open with those keys is left in v1 and reported; ``seqexport rotate-keys`` upgrades
it once the right key is in SEQEXPORT_SECRET_KEYS (a run refuses a v1 secret until then).
Adds ``connection_tests``, one row per connection test, for the per-account rate limit.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"

log = logging.getLogger("seqexport.migrations")


def upgrade() -> None:
    op.create_table(
        "connection_tests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("tested_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_connection_tests_account", "connection_tests", ["account_id", "tested_at"])
    _reseal()


def downgrade() -> None:
    op.drop_index("ix_connection_tests_account", table_name="connection_tests")
    op.drop_table("connection_tests")


def _reseal() -> None:
    # Imported here: a migration module is loaded by Alembic's script directory, not by the package.
    from seqexport_dagster.errors import SecretKeyError
    from seqexport_dagster.store import seal_binding

    box = context.config.attributes.get("secret_box")
    exports = sa.table(
        "exports",
        sa.column("id"),
        sa.column("provider"),
        sa.column("endpoint"),
        sa.column("bucket"),
        sa.column("access_key_id"),
        sa.column("secret_ciphertext"),
    )
    bind = op.get_bind()
    rows = bind.execute(sa.select(exports).where(exports.c.secret_ciphertext.like("v1.%"))).all()
    if not rows:
        return
    if box is None:
        log.warning("%d stored secret(s) still use format v1; run `seqexport rotate-keys` to re-seal them", len(rows))
        return
    for r in rows:
        try:
            sealed = box.reseal(r.secret_ciphertext, seal_binding(r.id, r))
        except SecretKeyError as exc:
            log.warning("export %s: secret left in format v1: %s", r.id, exc.message)
            continue
        bind.execute(exports.update().where(exports.c.id == r.id).values(secret_ciphertext=sealed))
