"""Locks: the application-side face of distributed locks (``app.lock``), over the ports.

A ``HeldLock`` carries the current ``Lease``; ``renew`` replaces it, ``guard(tx)`` fences a
write in the caller's SQL transaction. Waiting for a held lock polls with a short backoff:
a lock manager offers no wake-up, and correctness never depends on how soon a waiter notices.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from ledgerq.core import errors
from ledgerq.core.locks import (
    Lease,
    LockGuard,
    LockManager,
    check_lock_name,
    check_ttl,
    default_owner,
)

#: First and longest pause between tries of a waiting ``acquire``, in seconds.
FIRST_RETRY_SECONDS = 0.02
MAX_RETRY_SECONDS = 0.5


class HeldLock:
    """A lock this process holds: its lease, and renew, release and guard."""

    def __init__(self, locks: Locks, lease: Lease, ttl_seconds: float) -> None:
        self._locks = locks
        self.lease = lease
        """The current lease (replaced by every renew)."""
        self.ttl_seconds = ttl_seconds
        self.released = False

    @property
    def name(self) -> str:
        """The lock's name."""
        return self.lease.name

    @property
    def owner(self) -> str:
        """Who holds it (worker id or ``host:pid``)."""
        return self.lease.owner

    @property
    def token(self) -> int:
        """The fencing token: higher than every earlier holder's."""
        return self.lease.token

    @property
    def expires_at(self) -> datetime:
        """When the lease ends unless renewed (aware UTC)."""
        return self.lease.expires_at

    def renew(self, ttl: float | None = None) -> Lease:
        """Extend the lease to ``ttl`` seconds (default: the TTL it was taken with) from now;
        raise ``LeaseLost`` if it already expired or someone else took the lock."""
        seconds = self.ttl_seconds if ttl is None else check_ttl(ttl)
        self.lease = self._locks.manager.renew_lock(self.lease, ttl_seconds=seconds)
        return self.lease

    def guard(self, tx: object) -> None:
        """Fence a write: inside the caller's transaction ``tx`` (a SQLAlchemy connection of
        the ledger's database), raise ``LeaseLost`` unless this lease is still the lock's
        newest holding. Call it before the writes; it holds the lock's row until commit."""
        self._locks.guard.check_lease(self.lease, connection=tx)

    def release(self) -> bool:
        """Give the lock up; False if it had been lost already. Idempotent."""
        if self.released:
            return False
        self.released = True
        self._locks.forget(self)
        return self._locks.manager.release_lock(self.lease)

    def __repr__(self) -> str:
        return f"HeldLock(name={self.name!r}, owner={self.owner!r}, token={self.token})"


class Locks:
    """Acquire named, fenced locks through a ``LockManager``; guard writes with a ``LockGuard``."""

    def __init__(self, manager: LockManager, guard: LockGuard, *, owner: str | None = None) -> None:
        """``owner`` names this process in lock records; defaults to ``host:pid``."""
        self.manager = manager
        self.guard = guard
        self.owner = owner or default_owner()
        self._held_here: dict[tuple[int, str, str], HeldLock] = {}
        """Locks taken and not yet released, by (thread, name, owner): not re-entrant."""
        self._held_lock = threading.Lock()

    def acquire(
        self,
        name: str,
        *,
        ttl: float,
        timeout: float | None = 0.0,
        owner: str | None = None,
    ) -> HeldLock | None:
        """Take lock ``name`` for ``ttl`` seconds. ``timeout``: 0 tries once (the default),
        a number waits up to that many seconds, None waits as long as it takes. Returns None
        if the lock stayed held; raises ``InvalidLock`` for a bad name or TTL."""
        check_lock_name(name)
        seconds = check_ttl(ttl)
        if timeout is not None and timeout < 0:
            raise errors.InvalidLock(f"lock timeout must not be negative, got {timeout}")
        who = owner or self.owner
        self._refuse_reentry(name, who)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = FIRST_RETRY_SECONDS
        while True:
            lease = self.manager.acquire_lock(name, owner=who, ttl_seconds=seconds)
            if lease is not None:
                held = HeldLock(self, lease, seconds)
                with self._held_lock:
                    self._held_here[(threading.get_ident(), name, who)] = held
                return held
            if deadline is not None and time.monotonic() >= deadline:
                return None
            remaining = MAX_RETRY_SECONDS if deadline is None else deadline - time.monotonic()
            time.sleep(max(0.0, min(pause, remaining)))
            pause = min(pause * 2, MAX_RETRY_SECONDS)

    def forget(self, held: HeldLock) -> None:
        """``held`` was released: this thread may take its name again."""
        with self._held_lock:
            for key, value in list(self._held_here.items()):
                if value is held:
                    del self._held_here[key]

    def _refuse_reentry(self, name: str, owner: str) -> None:
        with self._held_lock:
            taken = (threading.get_ident(), name, owner) in self._held_here
        if taken:
            raise errors.InvalidLock(
                f"lock {name!r} is already held by this thread: locks are not re-entrant "
                "(waiting for it here would wait for ourselves); take it once"
            )

    @contextmanager
    def hold(
        self,
        name: str,
        *,
        ttl: float,
        timeout: float | None = None,
        owner: str | None = None,
    ) -> Iterator[HeldLock]:
        """Hold lock ``name`` for the block and release it after (an exception inside still
        releases it). Waits up to ``timeout`` seconds (None: without limit), then raises
        ``LockUnavailable``."""
        held = self.acquire(name, ttl=ttl, timeout=timeout, owner=owner)
        if held is None:
            raise errors.LockUnavailable(f"lock {name!r} is held by another owner")
        try:
            yield held
        finally:
            held.release()
