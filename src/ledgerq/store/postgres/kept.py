"""KeptConnection: one pooled connection of an engine that the fast path keeps checked out
between its statements, so a statement on the hot path does not pay SQLAlchemy's checkout and
check-in each time.

Measured (docs/benchmarks.md, 2026-12-07): in ``ledgerq bench`` with Redis, old and new code
interleaved, one-by-one enqueues went from 1,797/1,710 to 2,002/2,195 jobs/s and the start
latency's p99 from 3.8/3.6 to 3.1/3.0 ms; in a one-thread probe the gain was 15-25 us per call.
The checkout and check-in alone cost about 10 us in a tight loop; the rest of the bench's gain
is measured, not explained.

What the pool did, kept:
- The connection counts as checked out of its pool, so the pool's bound on the process's
  connections holds; one fewer is free for other callers while it is kept.
- A kept connection goes back to the pool after ``KEEP_SECONDS``, so the pool's recycling
  (``pool_recycle``) still replaces old sessions.
- A statement that fails leaves its connection to the pool's handling as before (invalidated
  when the session is gone); it is never kept.
- When the engine is disposed (the store closes), the kept connection is closed with it; one
  in use at that moment is not kept afterwards.
- A child process after ``fork`` never uses its parent's session (nor closes it).
"""

from __future__ import annotations

import os
import threading
import time

import sqlalchemy as sa
from sqlalchemy.pool import PoolProxiedConnection

#: Longest a connection stays kept before it goes back to the pool (and the pool's recycling
#: of old sessions applies to it again), in seconds.
KEEP_SECONDS = 300.0


class KeptConnection:
    """At most one of ``engine``'s pooled connections, idle between fast statements; thread-safe
    (a thread that finds none checks one out of the pool as before)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._lock = threading.Lock()
        self._kept: PoolProxiedConnection | None = None
        # The connection kept last and since when it has been kept: a connection in constant
        # use is kept again after each statement, and still goes back after KEEP_SECONDS.
        self._held: PoolProxiedConnection | None = None
        self._held_since = 0.0
        self._generation = 0  # bumped when the engine is disposed
        self._pid = os.getpid()
        # After a fork: the parent's session, referenced so it is never closed, never used.
        self._left_by_parent: list[PoolProxiedConnection] = []
        sa.event.listen(engine, "engine_disposed", lambda _engine: self.release())

    @property
    def generation(self) -> int:
        """Changes when the kept connection is released; pass the value read before taking a
        connection to ``keep``."""
        return self._generation

    @property
    def count(self) -> int:
        """1 while a connection is kept (it counts as checked out of the pool), else 0."""
        return 0 if self._kept is None else 1

    def take(self) -> PoolProxiedConnection | None:
        """The kept connection, now the caller's, or None (the caller checks one out)."""
        with self._lock:
            if self._pid != os.getpid():
                self._forget_after_fork()
            pooled, self._kept = self._kept, None
            expired = pooled is not None and time.monotonic() - self._held_since > KEEP_SECONDS
            if expired:
                self._held = None
        if pooled is not None and expired:
            pooled.close()  # back to the pool, which recycles it if it is old
            return None
        return pooled

    def keep(self, pooled: PoolProxiedConnection, generation: int) -> None:
        """Keep ``pooled`` (idle, healthy, in autocommit) for the next statement; it goes back
        to the pool instead if one is kept already or the engine was disposed since the caller
        read ``generation``."""
        with self._lock:
            if self._kept is None and generation == self._generation and self._pid == os.getpid():
                if pooled is not self._held:
                    self._held, self._held_since = pooled, time.monotonic()
                self._kept = pooled
                return
        pooled.close()

    def release(self) -> None:
        """Close the kept connection's session (the engine was disposed: the pool it came from
        is gone)."""
        with self._lock:
            pooled, self._kept, self._held = self._kept, None, None
            self._generation += 1
        if pooled is not None:
            pooled.invalidate()  # closes the session; check-in alone would leave it open

    def _forget_after_fork(self) -> None:
        # The session belongs to the parent: closing it here would end the parent's session.
        if self._kept is not None:
            self._left_by_parent.append(self._kept)
        self._kept = self._held = None
        self._pid = os.getpid()
