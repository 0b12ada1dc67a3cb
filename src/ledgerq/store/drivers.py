"""Chooses the driver of a database, in this one place: a new database is one package under
``store/`` and one entry here."""

from __future__ import annotations

import importlib

import sqlalchemy as sa

from ledgerq.store.dialects import Dialect

# Imported on first use: a SQLite ledger never imports psycopg.
_DRIVERS = {
    "postgresql": ("ledgerq.store.postgres", "PostgresDriver"),
    "postgres": ("ledgerq.store.postgres", "PostgresDriver"),
    "mysql": ("ledgerq.store.mariadb", "MariadbDriver"),
    "mariadb": ("ledgerq.store.mariadb", "MariadbDriver"),
    "sqlite": ("ledgerq.store.sqlite", "SqliteDriver"),
}


def known_database(name: str) -> bool:
    """Whether a URL's database name (its backend) has a driver."""
    return name in _DRIVERS


def driver_type(engine_dialect_name: str) -> type[Dialect]:
    """The driver class for a SQLAlchemy dialect name."""
    try:
        module, name = _DRIVERS[engine_dialect_name]
    except KeyError:
        raise ValueError(f"unsupported database dialect {engine_dialect_name!r}") from None
    found: type[Dialect] = getattr(importlib.import_module(module), name)
    return found


def driver_for(engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> Dialect:
    """The driver of ``engine``'s database, executing on it (and on ``relaxed_engine``)."""
    return driver_type(engine.dialect.name)(engine, relaxed_engine)
