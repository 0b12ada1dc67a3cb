"""How the store talks to its database: which engine serves which kind of transaction, and the
translation of driver errors into ledgerq's error tree (no driver exception leaves the store)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.job import as_utc
from ledgerq.store.dialects import Dialect
from ledgerq.store.drivers import driver_for
from ledgerq.store.engine import READ_ONLY_OPTION

_MISSING_TABLE = ("no such table", "does not exist", "doesn't exist")
#: What PgBouncer answers to the session settings of a direct connection.
_POOLER_REFUSAL = "unsupported startup parameter"


def unavailable(detail: str) -> errors.StoreUnavailable:
    """The database could not be used; names the fix when a pooler refused the connection."""
    if _POOLER_REFUSAL in detail:
        detail += (
            " (a connection pooler such as PgBouncer refused the session settings:"
            " set LEDGERQ_DB_POOLER=pgbouncer)"
        )
    return errors.StoreUnavailable(f"database unavailable: {detail}")


def translate_error(exc: sa.exc.DBAPIError) -> errors.StoreError:
    """Turn a driver error into ledgerq's error tree, with a one-line message."""
    detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    if any(marker in detail for marker in _MISSING_TABLE):
        return errors.StoreError(
            f"the ledger's tables are missing ({detail}): run `ledgerq db migrate`"
        )
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return unavailable(detail)
    return errors.StoreError(f"database error: {detail}")


def db_time(value: Any) -> datetime:
    """A timestamp read from the database (SQLite returns text for expressions) as aware UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return as_utc(value)


class SqlTransactions:
    """Engines and transaction helpers shared by the store's classes."""

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        self.engine = engine
        self.dialect: Dialect = driver_for(engine, relaxed_engine)
        options = self.dialect.single_statement_options
        self._single_engine = engine.execution_options(**options) if options else engine
        self._read_engine = engine.execution_options(**{READ_ONLY_OPTION: True})
        self._relaxed_pool = relaxed_engine
        relaxed = relaxed_engine or engine
        self._relaxed_engine = relaxed.execution_options(**options) if options else relaxed

    @property
    def relaxed_pool(self) -> sa.Engine | None:
        """The engine whose commits need not wait for the disk, if there is one."""
        return self._relaxed_pool

    def dispose(self) -> None:
        """Close every pooled connection of both engines."""
        self.engine.dispose()
        if self._relaxed_pool is not None:
            self._relaxed_pool.dispose()

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A transaction that only reads."""
        try:
            with self._read_engine.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    @contextmanager
    def _single(self, *, relaxed: bool = False) -> Iterator[Connection]:
        """A transaction for one statement; autocommit where the dialect allows it (one round
        trip instead of three on PostgreSQL)."""
        engine = self._relaxed_engine if relaxed else self._single_engine
        try:
            with engine.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    @contextmanager
    def _in(self, connection: object | None) -> Iterator[Connection]:
        """Use the caller's connection (their transaction decides) or a fresh transaction."""
        if connection is None:
            with self._begin() as conn:
                yield conn
        elif isinstance(connection, Connection):
            # The caller's transaction: a driver error still leaves the store translated
            # (a database gone mid-transaction is ``StoreUnavailable`` to the caller too).
            try:
                yield connection
            except sa.exc.DBAPIError as exc:
                raise translate_error(exc) from exc
        else:
            raise TypeError("tx must be a SQLAlchemy Connection or a LedgerQ transaction")
