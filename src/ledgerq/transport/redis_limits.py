"""RedisRateLimiter: fleet-wide rate limits (``core/limits.py``) kept in Redis, one key per
limit name holding its GCRA schedule, moved on by one Lua script on the server's clock, so every
process sharing the server shares the limit. Its client, client type and error tuple come from
``transport/redis.py`` (this module imports no redis itself)."""

from __future__ import annotations

from ledgerq.core import errors
from ledgerq.core.limits import Rate, RateDecision
from ledgerq.transport.redis import REDIS_ERRORS, RedisClient, connect

# Atomic on the server, on the server's clock (microseconds): admit when the theoretical
# arrival time is at most the tolerance ahead of now, and move it one interval on; else
# answer how long until it is.
_RATE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
if tat - now > tolerance then
  return {0, tat - now - tolerance}
end
local ttl = math.ceil((tat + interval - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', tat + interval), 'PX', ttl)
return {1, 0}
"""


class RedisRateLimiter:
    """The RateLimitBackend port over Redis: one key per limit name (its GCRA schedule),
    updated by one Lua script, so every process sharing the server shares the limit. A
    borrowed ``client`` is used instead of connecting to ``url`` and is not closed here."""

    def __init__(self, url: str, *, namespace: str, client: RedisClient | None = None) -> None:
        self._owns_client = client is None
        self._client: RedisClient = client or connect(
            url, socket_connect_timeout=1.0, socket_timeout=2.0
        )
        db = self._client.connection_pool.connection_kwargs.get("db", 0)
        self.prefix = f"{namespace}:{db}:rate:"
        self._script = self._client.register_script(_RATE_SCRIPT)

    def acquire_rate(self, *, name: str, rate: Rate) -> RateDecision:
        """Admit one use of ``name`` or deny with the seconds until one frees up; raise
        ``TransportError`` if Redis does not answer."""
        interval = max(int(rate.interval_seconds * 1_000_000), 1)
        tolerance = int(rate.tolerance_seconds * 1_000_000)
        try:
            allowed, wait_us = self._script(keys=[self.prefix + name], args=[interval, tolerance])
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis rate limiter failed: {exc}") from exc
        if int(allowed):
            return RateDecision(True)
        return RateDecision(False, max(int(wait_us), 1000) / 1_000_000)

    def close(self) -> None:
        """Release the connections, unless the client is borrowed."""
        if self._owns_client:
            self._client.close()
