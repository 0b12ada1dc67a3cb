"""Connecting to Redis: ``connect`` makes a client for a ``redis://`` URL or, for a
``redis+sentinel://`` URL, a client of the master the sentinels name (found again after each
failover); ``cluster_enabled`` tells a Redis Cluster node, which ledgerq refuses. Beside
``redis.py``, which re-exports both, and like it one of the two modules that import redis.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.sentinel

from ledgerq.core import errors, redis_url

#: Connect and reply timeout of each question to a sentinel (where is the master?).
SENTINEL_TIMEOUT_SECONDS = 1.0
#: What a failed Redis call raises (the server gone, a refused command, a dropped socket).
REDIS_ERRORS = (redis.RedisError, OSError)


try:  # redis-py >= 7: name the library version once, so each new connection does not read
    # it from the package metadata (milliseconds per connection, on every worker start)
    from redis.driver_info import DriverInfo

    _DRIVER: dict[str, Any] = {"driver_info": DriverInfo(lib_version=redis.__version__)}
except ImportError:  # older redis-py reads nothing per connection
    _DRIVER = {}


def connect(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` with ledgerq's connection options: of one server, or (for a
    ``redis+sentinel://`` URL) of the master the sentinels name, found again after each
    failover. Opens no socket; raise ``ConfigError`` for a URL it cannot use."""
    if redis_url.scheme_of(url) in redis_url.CLUSTER_SCHEMES:
        raise errors.ConfigError(redis_url.CLUSTER_REFUSAL)
    if not redis_url.is_sentinel_url(url):
        return redis.Redis.from_url(url, **_DRIVER, **options)
    try:
        target = redis_url.parse_sentinel_url(url)
    except ValueError as exc:
        raise errors.ConfigError(str(exc)) from None
    # The sentinels are asked with short timeouts of their own: a dead sentinel must not
    # hold up finding the master (the others are asked next).
    sentinel_options: dict[str, Any] = {
        "socket_connect_timeout": SENTINEL_TIMEOUT_SECONDS,
        "socket_timeout": SENTINEL_TIMEOUT_SECONDS,
        "username": target.sentinel_username,
        "password": target.sentinel_password,
        **_DRIVER,
    }
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_options
    )
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service_name,
        db=target.db,
        username=target.username,
        password=target.password,
        **_DRIVER,
        **options,
    )
    return client


def cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server runs in cluster mode (``INFO cluster``: ``cluster_enabled:1``);
    raise ``TransportError`` if it does not answer."""
    try:
        info: Any = client.info("cluster")
    except redis.ResponseError:
        return False  # a server that hides INFO (ACL) is checked by its first pop instead
    except REDIS_ERRORS as exc:
        raise errors.TransportError(f"Redis does not answer: {exc}") from exc
    return int(info.get("cluster_enabled", 0) or 0) == 1
