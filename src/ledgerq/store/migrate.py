"""Runs and reports Alembic migrations (``ledgerq db migrate`` / ``ledgerq db status``)."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ledgerq.core.schema import MigrationStatus
from ledgerq.store.engine import IDLE_IN_TRANSACTION_SECONDS
from ledgerq.store.migrations.env_settings import VERSION_TABLE
from ledgerq.store.transactions import translate_error


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "ledgerq.store:migrations")
    return config


def migrate(engine: sa.Engine, revision: str = "head") -> MigrationStatus:
    """Upgrade the database to ``revision`` (the newest by default) and return the status."""
    return _run(engine, command.upgrade, revision)


def downgrade(engine: sa.Engine, revision: str) -> MigrationStatus:
    """Downgrade the database to ``revision`` (rolling back to an older release) and return
    the status."""
    return _run(engine, command.downgrade, revision)


def _run(engine: sa.Engine, step: Callable[[Config, str], None], revision: str) -> MigrationStatus:
    config = _config()
    mariadb = engine.url.get_backend_name() == "mariadb"
    try:
        with engine.connect() as conn:
            # The ledger's guard against idle transactions (``IDLE_IN_TRANSACTION_SECONDS``)
            # is for its own short writes; a migration pauses between statements to load
            # its revisions, which a slow or busy host can stretch past it.
            if mariadb:
                conn.exec_driver_sql("SET SESSION idle_transaction_timeout = 0")
                conn.commit()  # ends the statement's autobegun transaction
            try:
                with conn.begin():
                    if engine.dialect.name == "postgresql":
                        conn.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
                    config.attributes["connection"] = conn
                    step(config, revision)
            finally:
                if mariadb:  # the connection goes back to the pool with the guard on
                    conn.exec_driver_sql(
                        f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_SECONDS}"
                    )
                    conn.commit()
    except sa.exc.DBAPIError as exc:
        raise translate_error(exc) from exc
    return status(engine)


def status(engine: sa.Engine) -> MigrationStatus:
    """Return the database's current revision and the head revision."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(
                conn, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    except sa.exc.DBAPIError as exc:
        raise translate_error(exc) from exc
    return MigrationStatus(current=current, head=head)
