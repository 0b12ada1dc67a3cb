"""RedisSpool: the enqueue spool in Redis (``LEDGERQ_SPOOL=redis``).

Layout: a list per producer, ``{namespace}:{db}:spool:{producer}`` (entries appended with
``RPUSH``, read from the head, removed with ``LTRIM`` after their commit), and a set of the
producers with entries, ``{namespace}:{db}:spool:producers``; appending and removing keep the
set in step inside one Lua script each, so a producer with entries is never missing from it.
``hold`` is a key ``...:spool-hold:{producer}`` set with ``NX PX`` (renewed by each ``peek``
of its holder), so workers never replay one producer's entries at the same time.

The spool is exactly as durable as that Redis: an entry survives a Redis restart only with
AOF persistence (``appendonly yes``; ``appendfsync always`` to survive a host crash too).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any, cast

from ledgerq.core import errors
from ledgerq.transport.redis import REDIS_ERRORS, RedisClient

#: Milliseconds a drainer's hold on a producer lasts unless its next ``peek`` renews it.
HOLD_MS = 60_000

# KEYS[1] the producer's list, KEYS[2] the producers set; ARGV[1] entry, ARGV[2] producer.
_APPEND = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""
# KEYS as above; ARGV[1] how many to drop, ARGV[2] producer.
_REMOVE = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[2]) end
return 1
"""
# KEYS[1] hold key; ARGV[1] token; ARGV[2] milliseconds. Renews only the holder's own hold.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS[1] hold key; ARGV[1] token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisSpool:
    """Spooled entries in Redis lists; thread-safe. The client is borrowed, never closed."""

    def __init__(self, client: RedisClient, *, namespace: str) -> None:
        self._client = client
        db = client.connection_pool.connection_kwargs.get("db", 0)
        self.prefix = f"{namespace}:{db}:spool"
        self._set = f"{self.prefix}:producers"
        self._append: Any = client.register_script(_APPEND)
        self._remove: Any = client.register_script(_REMOVE)
        self._release: Any = client.register_script(_RELEASE)
        self._renew: Any = client.register_script(_RENEW)
        self._held: dict[str, str] = {}

    def _list(self, producer: str) -> str:
        return f"{self.prefix}:{producer}"

    def append(self, producer: str, entry: str) -> None:
        """RPUSH the entry (and note the producer) in one script."""
        with _translated():
            self._append(keys=[self._list(producer), self._set], args=[entry, producer])

    def producers(self) -> list[str]:
        """Producers with entries."""
        with _translated():
            return sorted(_text(m) for m in cast(set[bytes], self._client.smembers(self._set)))

    def peek(self, producer: str, limit: int) -> list[str]:
        """The oldest ``limit`` entries; renews this process's hold on the producer."""
        with _translated():
            token = self._held.get(producer)
            if token is not None:
                self._renew(keys=[self._hold_key(producer)], args=[token, HOLD_MS])
            return [
                _text(e)
                for e in cast(list[bytes], self._client.lrange(self._list(producer), 0, limit - 1))
            ]

    def remove(self, producer: str, count: int) -> None:
        """Drop the ``count`` oldest entries (and the producer from the set once empty)."""
        with _translated():
            self._remove(keys=[self._list(producer), self._set], args=[count, producer])

    def size(self, producer: str) -> int:
        """How many entries the producer has."""
        with _translated():
            return cast(int, self._client.llen(self._list(producer)))

    def _hold_key(self, producer: str) -> str:
        return f"{self.prefix}-hold:{producer}"

    @contextlib.contextmanager
    def hold(self, producer: str) -> Iterator[bool]:
        """Hold the producer for the block if no other drainer does (``SET NX PX``)."""
        token = secrets.token_hex(8)
        key = self._hold_key(producer)
        with _translated():
            taken = bool(self._client.set(key, token, nx=True, px=HOLD_MS))
        if not taken:
            yield False
            return
        self._held[producer] = token
        try:
            yield True
        finally:
            self._held.pop(producer, None)
            with contextlib.suppress(*REDIS_ERRORS):
                self._release(keys=[key], args=[token])

    def close(self) -> None:
        """Nothing to release: the client is borrowed."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except REDIS_ERRORS as exc:
        raise errors.SpoolUnavailable(f"redis spool unavailable: {exc}") from exc
