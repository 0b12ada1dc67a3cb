"""Turns a database URL into a configured SQLAlchemy engine; each database's settings come
from its driver (see ``drivers.py``)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ledgerq.core import errors
from ledgerq.core.redaction import mask_url
from ledgerq.store.dialects import EngineSettings, Pooler
from ledgerq.store.drivers import driver_type, known_database

#: The type of a ledger's engine, named for the layers above that may not import SQLAlchemy.
LedgerEngine = sa.Engine

#: Execution option marking a transaction that only reads (SQLite then skips the write lock).
READ_ONLY_OPTION = "ledgerq_read_only"

#: A ledger connection left idle inside a transaction this long is closed by the server, so a
#: frozen process (SIGSTOP, a VM pause) cannot hold row locks that block the failover of its
#: own jobs. The store's transactions never wait on the client for anywhere near this long.
IDLE_IN_TRANSACTION_SECONDS = 5


def normalize_url(url: str) -> sa.URL:
    """Parse ``url`` and pick ledgerq's driver when the URL names none; raise ``ConfigError``
    (with the password masked) if it is malformed."""
    scheme = url.partition("://")[0].partition("+")[0]
    if known_database(scheme):
        url = driver_type(scheme).rewrite_url_text(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        # ValueError: a port that is not a number.
        raise errors.ConfigError(f"invalid database URL {mask_url(url)!r}: {exc}") from None
    backend = parsed.get_backend_name()
    if not known_database(backend):
        raise errors.ConfigError(
            f"unsupported database {backend!r}: use sqlite, postgresql, mysql or mariadb"
        )
    return driver_type(backend).normalize_url(parsed)


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    relaxed: bool = False,
    generic_plans: bool = False,
    application_name: str | None = None,
    pooler: Pooler | None = None,
) -> sa.Engine:
    """Create an engine for ``url`` with its driver's settings applied.

    ``relaxed``, ``generic_plans`` and ``application_name`` apply to PostgreSQL only (see
    ``PostgresDriver.engine_options``): commits that do not wait for the WAL flush, for claims
    and heartbeats; prepared statements planned once for all parameter values; the sessions'
    name. ``pooler``: the URL leads to a transaction-pooling proxy (PgBouncer; PostgreSQL
    only, else ``ConfigError``), so the engine relies on no session state (see ``Pooler``).
    """
    parsed = normalize_url(url)
    driver = driver_type(parsed.get_backend_name())
    asked = EngineSettings(pool_size, relaxed, generic_plans, application_name, pooler)
    parsed, options = driver.engine_options(parsed, asked)
    # No pre-ping: it costs a round trip per checkout on the hot path. A dropped connection
    # fails one call (StoreUnavailable), SQLAlchemy discards the pool, and callers retry.
    engine = sa.create_engine(parsed, pool_recycle=3600, **options)
    driver.configure_engine(engine)
    return engine
