"""SQLite's single enqueue on the standard library's sqlite3 directly: the statement compiled
once, run in a ``BEGIN IMMEDIATE`` transaction of its own on a pooled connection, under the
same process write lock as every other write transaction (``write_lock.py``), and committed
like them (WAL, ``synchronous = NORMAL``: durable against a crash of any process).

SQLAlchemy's execution machinery (connection wrapper, begin/commit events, compiled-cache
lookup, result metadata) cost about 60% of a single enqueue's client CPU on SQLite, against
about 30% for the statement and commit themselves (py-spy of 5,000 ``Task.enqueue`` calls;
docs/benchmarks.md, issue 29 item 7)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from ledgerq.core import errors
from ledgerq.store import transactions
from ledgerq.store.sqlite import write_lock

#: sqlite3 takes ``:name`` parameters from a dict as they are.
_NAMED = sqlite.dialect(paramstyle="named")


class SqliteInserts:
    """Inserts plain job rows (``job_rows.bulk_rows``: text, numbers and None only) into
    ``engine``'s database with ``statement``, an ``INSERT .. RETURNING id`` taking
    ``delay_s``."""

    def __init__(self, engine: sa.Engine, statement: sa.Insert, columns: Sequence[str]) -> None:
        self._engine = engine
        self._lock = write_lock.lock_of(engine)
        compiled = statement.compile(dialect=_NAMED, column_keys=list(columns))
        self._sql = str(compiled)
        self._columns = frozenset(columns)
        # The statement's own constants (the time format, 'now'): bound with every row.
        self._fixed = {k: v for k, v in compiled.params.items() if k not in self._columns}

    def fits(self, rows: Sequence[dict[str, Any]]) -> bool:
        """Whether ``rows`` carry exactly the columns the statement was compiled for."""
        return all(row.keys() == self._columns for row in rows)

    def insert(self, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Insert ``rows`` in one transaction; their ids in input order."""
        try:
            pooled = self._engine.raw_connection()
        except sa.exc.DBAPIError as exc:
            raise transactions.translate_error(exc) from exc
        try:
            connection: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
            with self._lock:
                return self._insert_in_transaction(connection, rows)
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
                pooled.invalidate(exc)  # a connection in an unknown state is not reused
            raise _translate(exc) from exc
        finally:
            pooled.close()

    def _insert_in_transaction(
        self, connection: sqlite3.Connection, rows: Sequence[dict[str, Any]]
    ) -> list[int]:
        connection.execute("BEGIN IMMEDIATE")
        try:
            ids = [
                int(connection.execute(self._sql, {**self._fixed, **r}).fetchone()[0]) for r in rows
            ]
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return ids


def _translate(exc: sqlite3.Error) -> errors.StoreError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "no such table" in detail:
        return errors.StoreError(
            f"the ledger's tables are missing ({detail}): run `ledgerq db migrate`"
        )
    if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
        return transactions.unavailable(detail)
    return errors.StoreError(f"database error: {detail}")
