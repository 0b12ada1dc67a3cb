"""Names the migration environment and migrate.py share."""

VERSION_TABLE = "ledgerq_alembic_version"
