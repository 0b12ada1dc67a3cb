"""Distributed locks with fencing: the ``Lease`` value and the ports behind ``app.lock``.

Invariant: a lock's fencing token comes from the ledger's per-name counter (``distributed_locks``)
and only ever grows, whichever implementation (database or Redis) keeps the lock itself, so a
holder that lost its lock is refused by a guarded write even after Redis lost every key.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ledgerq.core import errors

LOCK_NAME_MAX = 200
OWNER_MAX = 160
#: The longest TTL a lock may ask for: a day. Longer is almost surely a unit mistake.
MAX_TTL_SECONDS = 86400.0


def check_lock_name(name: str) -> str:
    """Return ``name`` if it can name a lock (1-200 characters), else raise ``InvalidLock``."""
    if not isinstance(name, str) or not 0 < len(name) <= LOCK_NAME_MAX:
        raise errors.InvalidLock(f"lock name must be 1 to {LOCK_NAME_MAX} characters")
    return name


def check_ttl(ttl_seconds: float) -> float:
    """Return ``ttl_seconds`` as a float if it is a sane TTL, else raise ``InvalidLock``."""
    if not isinstance(ttl_seconds, int | float) or not 0 < ttl_seconds <= MAX_TTL_SECONDS:
        raise errors.InvalidLock(
            f"lock ttl must be more than 0 and at most {MAX_TTL_SECONDS:.0f} s, got {ttl_seconds!r}"
        )
    return float(ttl_seconds)


def default_owner() -> str:
    """The owner id of a lock taken outside a worker: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"[:OWNER_MAX]


@dataclass(frozen=True, slots=True)
class Lease:
    """One holding of a named lock. ``token`` is its fencing token (higher than every earlier
    holding's); ``expires_at`` is by the database clock, or for Redis by the Redis TTL."""

    name: str
    owner: str
    token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class LockRecord:
    """A held or stale lock as the ledger records it (for ``queue list-locks``)."""

    name: str
    owner: str
    token: int
    acquired_at: datetime
    expires_at: datetime
    age_seconds: float
    expires_in_seconds: float
    """Negative once expired."""
    owner_alive: bool
    """The owner is an active registered worker or, for other owners, the lease has not
    expired."""

    @property
    def stale(self) -> bool:
        """Expired, or held by a worker the fleet no longer counts as alive."""
        return self.expires_in_seconds <= 0 or not self.owner_alive


class LockManager(Protocol):
    """Mutual exclusion by name, with leases that expire unless renewed."""

    def acquire_lock(self, name: str, *, owner: str, ttl_seconds: float) -> Lease | None:
        """Take the lock if nobody holds it (or the holder's lease expired) without waiting;
        None if it is held."""

    def renew_lock(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Extend a held lease to ``ttl_seconds`` from now; raise ``LeaseLost`` if it expired
        or was taken over."""

    def release_lock(self, lease: Lease) -> bool:
        """Give the lock up; False if it was no longer held by this lease."""

    def close(self) -> None:
        """Release connections of the manager's own."""


class FencingCounter(Protocol):
    """The ledger's per-name token counter and lock record, for lock managers that keep the
    lock elsewhere (Redis)."""

    def issue_token(
        self, name: str, *, owner: str, ttl_seconds: float, confirm: Callable[[int], bool]
    ) -> Lease | None:
        """Increment the name's counter and record ``owner`` as holder, in one transaction
        that commits only if ``confirm(token)`` (which takes the lock) returns True."""

    def record_renewal(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Record that ``lease`` was extended to ``ttl_seconds`` from now."""

    def record_release(self, lease: Lease) -> None:
        """Record that ``lease`` ended (its token stays the counter's value)."""


class LockGuard(Protocol):
    """Fences writes of lock holders inside their own SQL transaction."""

    def check_lease(self, lease: Lease, *, connection: object) -> None:
        """Raise ``LeaseLost`` unless ``lease.token`` is still the newest token of its lock;
        locks the lock's row until the caller's transaction ends, so no new holder gets a
        token before the guarded write commits."""


class LockAdmin(Protocol):
    """What operators see and repair of the fleet's locks."""

    def list_locks(self) -> list[LockRecord]:
        """Every lock that has a holder on record, by name."""

    def clear_stale_locks(self) -> list[LockRecord]:
        """Release every stale lock (see ``LockRecord.stale``); return those released."""
