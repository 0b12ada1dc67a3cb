"""RedisPool: the one Redis client (and connection pool) of one application.

The composition root (``app/wiring.py``) keeps one ``RedisPool`` in ``Parts`` and lends its
client to every Redis user it builds: the producer's and the worker's ``RedisTransport``, the
workflow announcer and event signal, the control lane, ``RedisRateLimiter`` and
``RedisLockManager``. Borrowers never close the client; ``RedisPool.close()`` does, after
closing the borrowers it was told of (``track``), so their pub/sub threads end first.

One set of connection options serves every borrower (``POOL_OPTIONS``): the socket timeout
must outlast the longest blocking call, the transport's ``BZMPOP`` of at most
``MAX_BLOCK_SECONDS``. redis-py's pool hands each caller a connection of its own for the
duration of a command (a blocked pop, a pub/sub subscription), and opens another when all are
busy, so a blocked pop never holds up a push or a lock.

This module imports no redis itself; the client comes from ``transport/redis.py``, imported on
first use, so an application without Redis never loads the library.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ledgerq.transport.redis import RedisClient


class Closable(Protocol):
    """A borrower that holds more than the client (threads, keys) and releases it on close."""

    def close(self) -> None:
        """Release what the borrower holds, but not the borrowed client."""


def pool_options() -> dict[str, Any]:
    """The connection options of every pooled connection: connect within 1 s; a reply may
    take 2 s beyond the longest blocking pop; idle connections are checked after 30 s."""
    from ledgerq.transport.redis import MAX_BLOCK_SECONDS

    return {
        "socket_connect_timeout": 1.0,
        "socket_timeout": MAX_BLOCK_SECONDS + 2.0,
        "health_check_interval": 30,
    }


class RedisPool:
    """One lazily created, thread-safe Redis client for ``url``, shared by its borrowers."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._client: RedisClient | None = None
        self._borrowers: weakref.WeakSet[Closable] = weakref.WeakSet()

    @property
    def url(self) -> str:
        """The Redis URL this pool connects to."""
        return self._url

    def client(self) -> RedisClient:
        """The shared client, created on the first call (no socket opens until a command
        runs). After ``close`` a call creates a new one."""
        with self._lock:
            if self._client is None:
                from ledgerq.transport.redis import connect

                self._client = connect(self._url, **pool_options())
            return self._client

    def track(self, borrower: Closable) -> None:
        """Close ``borrower`` (if still alive) when the pool closes."""
        with self._lock:
            self._borrowers.add(borrower)

    def close(self) -> None:
        """Close the tracked borrowers, then disconnect every connection of the pool.
        Calling it again does nothing."""
        with self._lock:
            borrowers = list(self._borrowers)
            self._borrowers.clear()
        for borrower in borrowers:
            borrower.close()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
