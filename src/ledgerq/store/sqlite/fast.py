"""SQLite's hot writes on the standard library's sqlite3 directly: the single enqueue and the
group completion. Each statement is compiled once by SQLAlchemy from the store's own statement
(a move stays spelled once, in ``moves``) and run in a ``BEGIN IMMEDIATE`` transaction of its
own on a pooled connection, under the same process write lock as every other write
transaction (``write_lock.py``), and committed like them (WAL, ``synchronous = NORMAL``:
durable against a crash of any process).

SQLAlchemy's execution machinery (connection wrapper, begin/commit events, compiled-cache
lookup, result metadata) cost about 60% of a single enqueue's client CPU on SQLite, against
about 30% for the statement and commit themselves (py-spy of 5,000 ``Task.enqueue`` calls), and
a completion group ran one SQLAlchemy execution per job (docs/benchmarks.md, issue 29 item 7).
Only values sqlite3 binds as they are pass here: text, numbers and None."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from ledgerq.core import errors
from ledgerq.store import transactions
from ledgerq.store.sqlite import busy, write_lock

#: sqlite3 takes ``:name`` parameters from a dict as they are.
_NAMED = sqlite.dialect(paramstyle="named")


class Compiled:
    """One statement's SQL text and its own constants (the time format, 'now', fixed
    states), which ``bind`` merges under each call's parameters."""

    def __init__(self, statement: sa.ClauseElement, columns: Sequence[str] | None = None) -> None:
        compiled = statement.compile(
            dialect=_NAMED, column_keys=None if columns is None else list(columns)
        )
        self.sql = str(compiled)
        if "POSTCOMPILE" in self.sql:
            raise ValueError("expanding parameters are not supported on the fast path")
        self._fixed = dict(compiled.params)

    def bind(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The statement's parameters: its constants, then ``params``."""
        return {**self._fixed, **params}


class RawWrites:
    """Write transactions on ``engine``'s pooled sqlite3 connections."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._lock = write_lock.lock_of(engine)

    @contextmanager
    def transaction(self, *, spin: bool = True) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` .. ``COMMIT`` (``ROLLBACK`` on any error) under the write lock;
        driver errors leave as ledgerq's errors. ``spin``: wait for another process's write in
        short steps first (``busy.py``); without it, only SQLite's busy handler waits."""
        try:
            pooled = self._engine.raw_connection()
        except sa.exc.DBAPIError as exc:
            raise transactions.translate_error(exc) from exc
        try:
            connection: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
            with self._lock:
                if not (spin and busy.try_begin_immediate(connection)):
                    connection.execute("BEGIN IMMEDIATE")
                try:
                    yield connection
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
                pooled.invalidate(exc)  # a connection in an unknown state is not reused
            raise _translate(exc) from exc
        finally:
            pooled.close()


def _translate(exc: sqlite3.Error) -> errors.StoreError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "no such table" in detail:
        return errors.StoreError(
            f"the ledger's tables are missing ({detail}): run `ledgerq db migrate`"
        )
    if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
        return transactions.unavailable(detail)
    return errors.StoreError(f"database error: {detail}")
