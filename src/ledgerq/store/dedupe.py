"""Dedupe windows: a ``dedupe_key`` taken for a time window after an enqueue, even once its job
finished (``enqueue(dedupe_key=..., dedupe_for=...)``), kept in ``job_dedupe_windows``.

Invariant: within a window there is one row per key, taken by exactly one enqueue: the take is
an UPDATE of an expired row or an INSERT of a new one, and a concurrent taker blocks on that
row (or its key) until the first transaction ends, then sees the window taken.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.store.dialects import Dialect
from ledgerq.store.tables import job_dedupe_windows

w = job_dedupe_windows


class DedupeWindows:
    """Statements on ``job_dedupe_windows``, run in the enqueue's own transaction."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect

    def holder(self, conn: Connection, key: str) -> int | None:
        """The job holding ``key`` in an unexpired window, or None."""
        stmt = sa.select(w.c.job_id).where(w.c.dedupe_key == key, w.c.expires_at > self._d.now())
        found = conn.execute(stmt).scalar()
        return int(found) if found is not None else None

    def take(self, conn: Connection, key: str, seconds: float) -> bool:
        """Open a window of ``seconds`` (database clock) for ``key``; False if an unexpired
        window holds it. The caller attaches its job with ``attach`` in the same transaction."""
        expires = self._d.now_plus(sa.literal(float(seconds), sa.Float))
        reopen = (
            sa.update(w)
            .where(w.c.dedupe_key == key, w.c.expires_at <= self._d.now())
            .values(job_id=None, expires_at=expires)
        )
        if conn.execute(reopen).rowcount == 1:
            return True
        return self._d.insert_or_skip(conn, w, {"dedupe_key": key, "expires_at": expires})

    def attach(self, conn: Connection, key: str, job_id: int) -> None:
        """Record ``job_id`` as the job a duplicate enqueue of ``key`` gets."""
        conn.execute(sa.update(w).where(w.c.dedupe_key == key).values(job_id=job_id))
