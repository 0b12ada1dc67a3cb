"""SqlLockAdmin: what operators see of the fleet's locks, and the release of stale ones.

A lock is stale when its lease expired (database clock) or its owner is a registered worker
that is no longer ``active``. Clearing frees the holder but keeps the row, so the fencing
counter survives and every later token is still higher.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core.fleet import WorkerState
from ledgerq.core.locks import LockRecord
from ledgerq.store.tables import distributed_locks, queue_workers
from ledgerq.store.transactions import SqlTransactions, db_time

t = distributed_locks
w = queue_workers


class SqlLockAdmin(SqlTransactions):
    """LockAdmin over ``distributed_locks`` joined with the worker registry."""

    def _records(self, conn: Connection) -> list[LockRecord]:
        d = self.dialect
        stmt = (
            sa.select(
                t.c.name,
                t.c.owner,
                t.c.token,
                t.c.acquired_at,
                t.c.expires_at,
                w.c.state.label("worker_state"),
                d.now().label("db_now"),
            )
            .select_from(t.outerjoin(w, w.c.id == t.c.owner))
            .where(t.c.owner.is_not(None))
            .order_by(t.c.name)
        )
        return [_record(row._mapping) for row in conn.execute(stmt)]

    def list_locks(self) -> list[LockRecord]:
        """Every lock with a holder on record, by name."""
        with self._read() as conn:
            return self._records(conn)

    def count_held_locks(self) -> int:
        """Locks whose lease has not expired (the ``distributed_locks_held`` gauge)."""
        stmt = sa.select(sa.func.count()).where(
            t.c.owner.is_not(None), t.c.expires_at > self.dialect.now()
        )
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def clear_stale_locks(self) -> list[LockRecord]:
        """Free every stale lock; a lock re-taken meanwhile (a new token) is left alone."""
        with self._begin() as conn:
            stale = [r for r in self._records(conn) if r.stale]
            cleared = []
            for record in stale:
                stmt = (
                    sa.update(t)
                    .where(t.c.name == record.name, t.c.token == record.token)
                    .values(owner=None, expires_at=None)
                )
                if conn.execute(stmt).rowcount == 1:
                    cleared.append(record)
        return cleared


def _record(row: Any) -> LockRecord:
    now = db_time(row["db_now"])
    acquired = db_time(row["acquired_at"])
    expires = db_time(row["expires_at"])
    expires_in = (expires - now).total_seconds()
    if row["worker_state"] is not None:
        alive = row["worker_state"] == WorkerState.ACTIVE.value
    else:
        alive = expires_in > 0
    return LockRecord(
        name=str(row["name"]),
        owner=str(row["owner"]),
        token=int(row["token"]),
        acquired_at=acquired,
        expires_at=expires,
        age_seconds=max((now - acquired).total_seconds(), 0.0),
        expires_in_seconds=expires_in,
        owner_alive=alive,
    )
