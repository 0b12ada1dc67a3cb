"""FallbackRates: the database takes over the rate windows while Redis does not answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgerq.core import errors
from ledgerq.core import limits as lim
from ledgerq.store.engine import create_engine
from ledgerq.store.limit_store import SqlLimitStore
from ledgerq.transport.redis_limits import RedisRateLimiter
from tests.redis_server import RedisServer


@pytest.fixture
def store(database_url: str) -> Iterator[SqlLimitStore]:
    engine = create_engine(database_url)
    yield SqlLimitStore(engine)
    engine.dispose()


def test_rates_fall_back_to_the_database_when_redis_is_down(
    store: SqlLimitStore, redis_server: RedisServer
) -> None:
    limiter = RedisRateLimiter(redis_server.url, namespace="limits-test")
    redis_server.kill()
    with pytest.raises(errors.TransportError):
        limiter.acquire_rate(name="rate:x", rate=lim.Rate(1, 60))
    rates = lim.FallbackRates(limiter, store)
    assert rates.acquire_rate(name="rate:x", rate=lim.Rate(1, 60)).allowed
    assert rates.fallback_active
    assert not rates.acquire_rate(name="rate:x", rate=lim.Rate(1, 60)).allowed
    limiter.close()
