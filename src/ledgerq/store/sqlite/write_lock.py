"""SQLite's engine setup: WAL, and one writer at a time per process (``BEGIN IMMEDIATE``)."""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.store.engine import READ_ONLY_OPTION
from ledgerq.store.sqlite import busy

#: Engine execution option carrying the process's write lock of that engine's database, for
#: the driver's own transactions on raw connections (``fast.py``).
WRITE_LOCK_OPTION = "ledgerq_sqlite_write_lock"


def check_url(url: sa.URL) -> sa.URL:
    """Refuse an in-memory database: every connection would get its own empty one."""
    mode = url.query.get("mode")
    if url.database in (None, "", ":memory:") or mode == "memory":
        raise errors.ConfigError(
            "an in-memory SQLite database cannot be a ledger: every connection would get its"
            " own empty database; use a file, e.g. sqlite:///ledgerq.db"
        )
    return url


def configure(engine: sa.Engine) -> None:
    """Set up ``engine``'s connections and take the write lock at the start of every
    transaction that writes (published as the ``WRITE_LOCK_OPTION`` execution option)."""

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE below is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy.BUSY_TIMEOUT_MS}")
        cursor.close()

    # Threads of one process queue here for the write lock instead of in SQLite's busy
    # handler, which polls with sleeps of up to 100 ms.
    write_lock = threading.RLock()
    engine.update_execution_options(**{WRITE_LOCK_OPTION: write_lock})
    # The connections (by id) whose transaction holds it. Not kept in ``conn.info``: reading
    # that on a connection a KeyboardInterrupt invalidated raises instead of ending the
    # transaction (a Ctrl-C then showed a traceback, and a held lock would never be released).
    holders: set[int] = set()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # Take the write lock up front: a deferred transaction that reads and then writes can
        # fail with SQLITE_BUSY instead of waiting, which would make claims flaky. Read-only
        # calls say so and stay deferred, so monitoring never blocks the workers.
        if conn.get_execution_options().get(READ_ONLY_OPTION, False):
            conn.exec_driver_sql("BEGIN")
            return
        write_lock.acquire()
        try:
            # Another process's write is waited for in short steps first (busy.py); the
            # statement through SQLAlchemy then waits the rest and raises its errors.
            raw = conn.connection.driver_connection
            if not busy.try_begin_immediate(raw):  # type: ignore[arg-type]
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            write_lock.release()
            raise
        holders.add(id(conn))

    def _on_end(conn: sa.Connection) -> None:
        if id(conn) in holders:
            holders.discard(id(conn))
            write_lock.release()

    sa.event.listen(engine, "commit", _on_end)
    sa.event.listen(engine, "rollback", _on_end)


def lock_of(engine: sa.Engine) -> threading.RLock:
    """The write lock ``configure`` gave ``engine`` (or the engine it was derived from)."""
    found: threading.RLock = engine.get_execution_options()[WRITE_LOCK_OPTION]
    return found
