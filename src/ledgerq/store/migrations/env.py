"""Alembic environment: runs ledgerq's migrations on the connection migrate.py hands over."""

from __future__ import annotations

from alembic import context

from ledgerq.store.migrations.env_settings import VERSION_TABLE, include_object_for
from ledgerq.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    include_object=include_object_for(connection.dialect.name),
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
