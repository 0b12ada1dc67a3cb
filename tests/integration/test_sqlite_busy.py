"""SQLite's write lock held by another connection (store/sqlite/busy.py): ``BEGIN IMMEDIATE``
retried in short steps for a bounded time, then handed back to SQLite's busy handler, with the
connection's ``busy_timeout`` restored either way."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.store.sqlite import busy


@pytest.fixture
def connections(tmp_path: Path) -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
    path = tmp_path / "ledger.db"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("PRAGMA journal_mode=WAL")
    second = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    second.execute(f"PRAGMA busy_timeout={busy.BUSY_TIMEOUT_MS}")
    yield first, second
    first.close()
    second.close()


def busy_timeout(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA busy_timeout").fetchone()[0])


def test_a_free_lock_is_taken_at_once(
    connections: tuple[sqlite3.Connection, sqlite3.Connection],
) -> None:
    _, second = connections
    assert busy.try_begin_immediate(second) is True
    assert second.in_transaction
    assert busy_timeout(second) == busy.BUSY_TIMEOUT_MS
    second.execute("CREATE TABLE t (x INTEGER)")
    second.execute("COMMIT")


def test_a_held_lock_is_retried_for_a_bounded_time_then_left_to_sqlite(
    connections: tuple[sqlite3.Connection, sqlite3.Connection],
) -> None:
    first, second = connections
    first.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    assert busy.try_begin_immediate(second) is False
    waited = time.monotonic() - started
    assert busy.SPIN_SECONDS <= waited < busy.BUSY_TIMEOUT_MS / 1000  # not the handler's 30 s
    assert not second.in_transaction
    assert busy_timeout(second) == busy.BUSY_TIMEOUT_MS  # the fallback waits as before
    first.execute("COMMIT")
    assert busy.try_begin_immediate(second) is True
    second.execute("COMMIT")


def test_other_errors_are_left_to_the_caller(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        connection.execute("BEGIN")  # already in a transaction: BEGIN fails, and not as busy
        started = time.monotonic()
        assert busy.try_begin_immediate(connection) is False
        assert time.monotonic() - started < busy.SPIN_SECONDS
        assert busy_timeout(connection) == busy.BUSY_TIMEOUT_MS
    finally:
        connection.close()
