"""Alembic environment: always driven programmatically by `ControlPlane.migrate` (`store.control_plane`)."""

from __future__ import annotations

from alembic import context

from seqexport_dagster.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
