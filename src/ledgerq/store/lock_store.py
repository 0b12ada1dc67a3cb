"""SqlLocks: distributed locks in the ``distributed_locks`` table, the fencing counter the Redis
lock manager draws its tokens from, and the guard that fences a holder's writes.

Invariant: a lock's row is never deleted and its ``token`` only grows (every holding increments
it), so a token once superseded is refused by ``check_lease`` forever. Expiry is decided by the
database clock, never the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.locks import Lease
from ledgerq.store.tables import distributed_locks
from ledgerq.store.transactions import SqlTransactions, db_time, translate_error

t = distributed_locks


class _Declined(Exception):
    """Rolls back a token issue whose confirmation failed."""


class SqlLocks(SqlTransactions):
    """LockManager, FencingCounter and LockGuard over the ledger's ``distributed_locks``."""

    @contextmanager
    def _racing(self) -> Iterator[Connection]:
        """A transaction in which a primary-key clash (another process created the same
        lock's row at the same moment) counts as losing the race, not as an error."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.IntegrityError:
            raise _Declined from None
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    def _expires(self, ttl_seconds: float) -> sa.ColumnElement[Any]:
        return self.dialect.now_plus(sa.literal(float(ttl_seconds), sa.Float))

    def _take(
        self, conn: Connection, name: str, owner: str, ttl_seconds: float, *, only_if_free: bool
    ) -> Lease | None:
        """Increment the counter of ``name`` and record ``owner`` (creating the row if it is
        the lock's first use); with ``only_if_free``, only if nobody holds an unexpired lease."""
        d = self.dialect
        held = {"owner": owner, "acquired_at": d.now(), "expires_at": self._expires(ttl_seconds)}
        stmt = sa.update(t).where(t.c.name == name).values(token=t.c.token + 1, **held)
        if only_if_free:
            stmt = stmt.where(sa.or_(t.c.owner.is_(None), t.c.expires_at <= d.now()))
        if conn.execute(stmt).rowcount != 1:
            if conn.execute(sa.select(t.c.token).where(t.c.name == name)).first() is not None:
                return None
            conn.execute(sa.insert(t).values(name=name, token=1, **held))
        return self._lease(conn, name)

    def _lease(self, conn: Connection, name: str) -> Lease:
        row = conn.execute(
            sa.select(t.c.owner, t.c.token, t.c.expires_at).where(t.c.name == name)
        ).one()
        return Lease(name, str(row.owner), int(row.token), db_time(row.expires_at))

    # -- LockManager ---------------------------------------------------------------------

    def acquire_lock(self, name: str, *, owner: str, ttl_seconds: float) -> Lease | None:
        """Take ``name`` if it is free or its lease expired (by the database clock); None if
        another holder has it. Never waits for the holder."""
        try:
            with self._racing() as conn:
                return self._take(conn, name, owner, ttl_seconds, only_if_free=True)
        except _Declined:
            return None

    def renew_lock(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Extend an unexpired lease to ``ttl_seconds`` from now; raise ``LeaseLost`` if it
        expired, was released or was taken over."""
        d = self.dialect
        stmt = (
            sa.update(t)
            .where(
                t.c.name == lease.name,
                t.c.token == lease.token,
                t.c.owner == lease.owner,
                t.c.expires_at > d.now(),
            )
            .values(expires_at=self._expires(ttl_seconds))
        )
        with self._begin() as conn:
            if conn.execute(stmt).rowcount != 1:
                raise errors.LeaseLost(f"lock {lease.name!r} (token {lease.token}) was lost")
            return self._lease(conn, lease.name)

    def release_lock(self, lease: Lease) -> bool:
        """Free the lock if ``lease`` still holds it; False if it did not."""
        with self._begin() as conn:
            return self._clear(conn, lease.name, lease.token, lease.owner)

    def close(self) -> None:
        """Nothing to release: the engine belongs to the store."""

    def _clear(self, conn: Connection, name: str, token: int, owner: str) -> bool:
        stmt = (
            sa.update(t)
            .where(t.c.name == name, t.c.token == token, t.c.owner == owner)
            .values(owner=None, expires_at=None)
        )
        return bool(conn.execute(stmt).rowcount == 1)

    # -- FencingCounter ------------------------------------------------------------------

    def issue_token(
        self, name: str, *, owner: str, ttl_seconds: float, confirm: Callable[[int], bool]
    ) -> Lease | None:
        """Increment the counter of ``name`` and record ``owner``, committed only if
        ``confirm(token)`` takes the lock (the row stays locked meanwhile, so tokens reach
        the lock in the order they were issued)."""
        try:
            with self._racing() as conn:
                lease = self._take(conn, name, owner, ttl_seconds, only_if_free=False)
                if lease is None or not confirm(lease.token):
                    raise _Declined
                return lease
        except _Declined:
            return None

    def record_renewal(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Record the new expiry of ``lease`` (nothing if a newer holding replaced it)."""
        stmt = (
            sa.update(t)
            .where(t.c.name == lease.name, t.c.token == lease.token)
            .values(expires_at=self._expires(ttl_seconds))
        )
        with self._begin() as conn:
            conn.execute(stmt)
            return self._lease(conn, lease.name)

    def record_release(self, lease: Lease) -> None:
        """Record that ``lease`` ended (nothing if a newer holding replaced it)."""
        with self._begin() as conn:
            self._clear(conn, lease.name, lease.token, lease.owner)

    # -- LockGuard -----------------------------------------------------------------------

    def check_lease(self, lease: Lease, *, connection: object) -> None:
        """Raise ``LeaseLost`` unless ``lease`` is the newest holding of its lock and was not
        released; lock the row (``FOR UPDATE``) until the caller's transaction ends, so no
        new token is issued before the guarded write commits."""
        if not isinstance(connection, Connection):
            raise TypeError("connection must be a SQLAlchemy Connection inside a transaction")
        stmt = sa.select(t.c.token, t.c.owner).where(t.c.name == lease.name)
        stmt = self.dialect.locking(stmt)
        try:
            row = connection.execute(stmt).first()
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc
        if row is None or int(row.token) != lease.token or row.owner != lease.owner:
            current = "none" if row is None else row.token
            raise errors.LeaseLost(
                f"lock {lease.name!r}: token {lease.token} is stale (current {current})"
            )
