"""Turns ``LEDGERQ_SPOOL`` into the enqueue spool (``core/spool.py``): none, a ``RedisSpool``
on the application's Redis pool, or a ``FileSpool`` in a local folder."""

from __future__ import annotations

from ledgerq.config.settings import Settings, spool_folder
from ledgerq.core import errors
from ledgerq.core.spool import Spool
from ledgerq.transport.file_spool import FileSpool
from ledgerq.transport.redis_pool import RedisPool


def build_spool(settings: Settings, redis: RedisPool | None) -> Spool | None:
    """The spool ``settings`` ask for (None when ``off``); ``redis`` is the application's
    pool, which a Redis spool borrows."""
    if settings.spool == "off":
        return None
    if settings.spool == "redis":
        if redis is None:
            raise errors.ConfigError("spool=redis needs redis_url (LEDGERQ_REDIS_URL)")
        # The one place that imports the Redis spool (it loads redis-py).
        from ledgerq.transport.redis_spool import RedisSpool

        return RedisSpool(redis.client(), namespace=settings.namespace)
    folder = spool_folder(settings.spool)
    assert folder is not None
    return FileSpool(folder)
