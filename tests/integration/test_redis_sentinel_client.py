"""A ``redis+sentinel://`` URL against a real Sentinel deployment the test starts (master,
replica, three sentinels on free ports): the application's one Redis pool reaches the master
the sentinels name, in the URL's db, with its password; the readiness probe asks the
sentinels too and says what is wrong when it cannot reach the master."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from ledgerq import JobContext, LedgerQ
from ledgerq.core.limits import Rate
from ledgerq.transport.probe import RedisPingProbe
from ledgerq.transport.redis_limits import RedisRateLimiter
from tests.redis_sentinel import SERVICE, SentinelSet

PASSWORD = "S3ntinel-pw"


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[SentinelSet]:
    """Master, replica and three sentinels, all with ``PASSWORD``; killed at the end."""
    (tmp_path / "sentinel").mkdir()
    servers = SentinelSet(tmp_path / "sentinel", password=PASSWORD)
    try:
        yield servers
    finally:
        servers.stop()


def test_the_application_pool_uses_the_master_the_sentinels_name(
    deployment: SentinelSet, make_database_url: Callable[[str], str]
) -> None:
    app = LedgerQ(
        database_url=make_database_url("sqlite"), redis_url=deployment.url(db=3), namespace="st"
    )

    @app.task(name="noop")
    def noop(ctx: JobContext) -> None:
        return None

    try:
        handle = noop.enqueue()
        assert app.client.flush_hints(10)
        assert app.client.unannounced == 0
        port = deployment.master.port
        with redis.Redis(host="127.0.0.1", port=port, password=PASSWORD, db=3) as master:
            assert master.zcard("st:3:queue:default") == 1
        assert app.parts.redis is not None
        shared = app.parts.redis.client()
        assert type(shared.connection_pool).__name__ == "SentinelConnectionPool"
        # Another borrower of the same pool: the rate limiter keeps its keys on the master.
        limiter = RedisRateLimiter("unused", namespace="st", client=shared)
        assert limiter.acquire_rate(name="sms", rate=Rate.parse("1/s")).allowed
        assert not limiter.acquire_rate(name="sms", rate=Rate.parse("1/s")).allowed
        assert app.jobs.get(handle.job_id).state == "queued"
    finally:
        app.close()


def test_the_readiness_probe_asks_the_sentinels(deployment: SentinelSet) -> None:
    up = RedisPingProbe(deployment.url()).check()
    assert up.ok and up.detail == f"master 127.0.0.1:{deployment.master.port}"

    wrong = deployment.url().replace(f"sentinel_password={PASSWORD}", "sentinel_password=nope")
    refused = RedisPingProbe(wrong).check()
    assert not refused.ok and "names no master" in refused.detail
    assert "nope" not in refused.detail

    nobody = RedisPingProbe(f"redis+sentinel://127.0.0.1:1,127.0.0.1:2/{SERVICE}").check()
    assert not nobody.ok and "sentinel 127.0.0.1:1 unreachable" in nobody.detail
    assert "sentinel 127.0.0.1:2 unreachable" in nobody.detail

    # Until they fail over, the sentinels name the dead master: not ready, and why.
    deployment.master.kill()
    down = RedisPingProbe(deployment.url()).check()
    assert not down.ok and down.detail.startswith(f"master 127.0.0.1:{deployment.master.port}")
