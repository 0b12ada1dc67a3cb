"""Migrating an empty database must give exactly what tables.py declares, on every dialect."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate, status
from ledgerq.store.migrations.env_settings import include_object_for
from ledgerq.store.tables import metadata


def test_migrate_from_empty_matches_the_declared_tables(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        before = status(engine)
        assert before.current is None and not before.up_to_date
        after = migrate(engine)
        assert after.up_to_date and after.current == after.head
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_object": include_object_for(conn.dialect.name)}
            )
            diff = compare_metadata(context, metadata)
        # The version table is Alembic's own; everything else must match exactly.
        diff = [
            d
            for d in diff
            if not (d[0] == "remove_table" and d[1].name == "ledgerq_alembic_version")
        ]
        assert diff == []
        assert migrate(engine).up_to_date  # running it again is a no-op
    finally:
        engine.dispose()
