"""RedisLockManager: the lock itself is a Redis key (``SET NX PX``) holding ``token:owner``;
renew and release compare that value first (Lua), so only the holder extends or deletes it.

The fencing token is not Redis's: it comes from the ledger's per-name counter (a
``FencingCounter``), issued in a transaction that commits only once the key is set. So tokens
keep growing after Redis is flushed or restarted, and a holder that lost its key to a flush is
still refused by a guarded write once someone else took the lock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ledgerq.core import errors
from ledgerq.core.locks import FencingCounter, Lease, LockRecord
from ledgerq.transport.redis import REDIS_ERRORS, RedisClient, connect

# KEYS[1] lock key; ARGV[1] expected value; ARGV[2] new TTL in ms.
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS[1] lock key; ARGV[1] expected value.
_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _millis(ttl_seconds: float) -> int:
    return max(1, math.ceil(ttl_seconds * 1000))


class RedisLockManager:
    """LockManager over Redis keys ``{namespace}:{db}:lock:{name}``; thread-safe."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        counter: FencingCounter,
        client: RedisClient | None = None,
    ) -> None:
        """``counter`` issues the fencing tokens and keeps the ledger's record of holders. A
        borrowed ``client`` is used instead of connecting to ``url`` and is not closed here."""
        self._owns_client = client is None
        self._client: RedisClient = client or connect(
            url, socket_connect_timeout=1.0, socket_timeout=5.0
        )
        db = self._client.connection_pool.connection_kwargs.get("db", 0)
        self.prefix = f"{namespace}:{db}:lock:"
        self._counter = counter
        self._extend: Any = self._client.register_script(_EXTEND)
        self._delete: Any = self._client.register_script(_DELETE)

    def _key(self, name: str) -> str:
        return self.prefix + name

    @staticmethod
    def _value(token: int, owner: str) -> str:
        return f"{token}:{owner}"

    def acquire_lock(self, name: str, *, owner: str, ttl_seconds: float) -> Lease | None:
        """Take the key with ``SET NX PX``; None if it exists. The ledger issues the token
        and commits it only once the key is ours (a cheap ``EXISTS`` first spares the ledger
        a write while the lock is plainly held)."""
        key = self._key(name)
        taken: list[str] = []

        def take(token: int) -> bool:
            value = self._value(token, owner)
            if self._client.set(key, value, nx=True, px=_millis(ttl_seconds)):
                taken.append(value)
                return True
            return False

        try:
            if self._client.exists(key):
                return None
            return self._counter.issue_token(
                name, owner=owner, ttl_seconds=ttl_seconds, confirm=take
            )
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis lock {name!r}: {exc}") from exc
        except errors.StoreError:
            # The key was set but its token never committed: give the key back.
            for value in taken:
                self._delete(keys=[key], args=[value])
            raise

    def renew_lock(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Extend the key if it still holds this lease's value; else raise ``LeaseLost``."""
        try:
            extended = self._extend(
                keys=[self._key(lease.name)],
                args=[self._value(lease.token, lease.owner), _millis(ttl_seconds)],
            )
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis lock {lease.name!r}: {exc}") from exc
        if not extended:
            raise errors.LeaseLost(f"lock {lease.name!r} (token {lease.token}) was lost")
        return self._counter.record_renewal(lease, ttl_seconds=ttl_seconds)

    def release_lock(self, lease: Lease) -> bool:
        """Delete the key if it still holds this lease's value; False if it did not."""
        try:
            deleted = bool(
                self._delete(
                    keys=[self._key(lease.name)], args=[self._value(lease.token, lease.owner)]
                )
            )
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis lock {lease.name!r}: {exc}") from exc
        self._counter.record_release(lease)
        return deleted

    def delete_stale_keys(self, records: Iterable[LockRecord]) -> int:
        """For locks the ledger reports stale (``clear-stale-locks``): delete each key that
        still holds that holder's value, so the lock is free now rather than when its TTL
        ends. A key someone else holds by now is left alone. Return how many went."""
        deleted = 0
        try:
            for record in records:
                value = self._value(record.token, record.owner)
                deleted += int(self._delete(keys=[self._key(record.name)], args=[value]))
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis locks: {exc}") from exc
        return deleted

    def close(self) -> None:
        """Release the connection pool, unless the client is borrowed."""
        if self._owns_client:
            self._client.close()
