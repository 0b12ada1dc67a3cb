"""Waiting for SQLite's write lock held by another process: retried at sub-millisecond
intervals for a short while, then left to SQLite's busy handler.

SQLite's own handler (``busy_timeout``) sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms
between tries, so a writer that missed the lock sleeps far longer than the other process's
write transaction holds it (a claim or a completion group: well under a millisecond). Two worker
processes on one ledger then spent a large share of their completer's and fetcher's time in
``BEGIN IMMEDIATE`` (py-spy ``--idle`` of a worker draining 8,000 jobs beside another: 28% of
the completer's samples, 10% of the fetcher's; docs/benchmarks.md, issue 29 item 7)."""

from __future__ import annotations

import sqlite3
import time

#: ``busy_timeout`` of every connection, in milliseconds: how long a writer waits in the end.
BUSY_TIMEOUT_MS = 30_000
#: How long ``try_begin_immediate`` retries on its own before SQLite's handler takes over.
SPIN_SECONDS = 0.05
#: Sleeps between its tries, in seconds (the last one repeats).
_SLEEPS = (0.0001, 0.0002, 0.0005, 0.001)


def try_begin_immediate(connection: sqlite3.Connection) -> bool:
    """Start a write transaction on ``connection`` (``BEGIN IMMEDIATE``) within
    ``SPIN_SECONDS``; False if the lock stayed busy or the statement failed otherwise (the
    caller then runs ``BEGIN IMMEDIATE`` as usual, which waits up to ``BUSY_TIMEOUT_MS`` and
    raises what it raises)."""
    connection.execute("PRAGMA busy_timeout=0")
    try:
        deadline = time.monotonic() + SPIN_SECONDS
        tries = 0
        while True:
            try:
                connection.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    return False
            time.sleep(_SLEEPS[min(tries, len(_SLEEPS) - 1)])
            tries += 1
    finally:
        connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
