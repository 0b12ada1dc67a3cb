"""The Transport contract, run against every implementation (``TRANSPORTS``), plus what the
Redis transport adds: priority order, one entry per id, garbage dropped and counted,
namespaces and database numbers kept apart, and the fallback to polling and back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.core import errors
from ledgerq.core.job import JobHint
from ledgerq.core.ports import Transport
from ledgerq.transport.polling import PollingTransport
from ledgerq.transport.redis import RedisTransport
from tests.helpers import wait_until
from tests.redis_server import RedisServer


def test_push_then_pull_never_invents_ids(transport: Transport) -> None:
    transport.push([JobHint(1, "default", 0), JobHint(2, "default", 0)])
    pulled = transport.pull(queues=["default"], limit=10, timeout=0.05)
    if transport.carries_ids():
        assert sorted(pulled) == [1, 2]
    else:
        assert pulled == []
    # Nothing is left, and a queue that got nothing gives nothing.
    assert transport.pull(queues=["default", "other"], limit=10, timeout=0.05) == []


def test_a_pull_of_no_ids_takes_none(transport: Transport) -> None:
    # A worker with no free slot, or one only waiting for work, asks for 0 ids: an id taken
    # then would never be claimed, and its job would wait for the reconciler's re-send.
    transport.push([JobHint(7, "default", 0)])
    assert transport.pull(queues=["default"], limit=0, timeout=0.05) == []
    pulled = transport.pull(queues=["default"], limit=10, timeout=0.05)
    assert pulled == ([7] if transport.carries_ids() else [])


def test_interrupt_ends_a_blocked_pull_at_once(transport: Transport) -> None:
    returned = threading.Event()

    def pull() -> None:
        transport.pull(queues=["default"], limit=5, timeout=30)
        returned.set()

    thread = threading.Thread(target=pull, daemon=True)
    thread.start()
    time.sleep(0.1)  # let the pull block; a wake-up before it blocks must not be lost either
    transport.interrupt()
    assert returned.wait(5), "interrupt did not wake the pull"


def test_an_interrupt_before_a_pull_ends_that_pull_at_once(transport: Transport) -> None:
    transport.interrupt()
    began = time.monotonic()
    assert transport.pull(queues=["default"], limit=5, timeout=30) == []
    assert time.monotonic() - began < 5


def test_a_healthy_transport_is_not_in_fallback_and_times_its_server(
    transport: Transport,
) -> None:
    assert transport.fallback_active is False
    # None: no server of its own (polling); else one round trip to it, in seconds.
    seconds = transport.round_trip_seconds()
    assert seconds is None or 0 < seconds < 5


def test_pull_waits_for_a_push_from_another_thread(transport: Transport) -> None:
    if not transport.carries_ids():
        pytest.skip("polling carries no ids")
    got: list[int] = []
    thread = threading.Thread(
        target=lambda: got.extend(transport.pull(queues=["a", "b"], limit=5, timeout=10)),
        daemon=True,
    )
    thread.start()
    transport.push([JobHint(42, "b", 0)])
    thread.join(10)
    assert got == [42]


@pytest.fixture
def redis_transport(redis_server: RedisServer) -> Iterator[RedisTransport]:
    made = RedisTransport(redis_server.url, namespace="test")
    yield made
    made.close()


def test_priority_then_age_and_one_entry_per_id(redis_transport: RedisTransport) -> None:
    t = redis_transport
    t.push([JobHint(10, "q", 5), JobHint(3, "q", 5), JobHint(7, "q", -1), JobHint(12, "q", 0)])
    t.push([JobHint(3, "q", 5), JobHint(3, "q", 5)])  # duplicates are stored once
    assert t.queue_lengths(["q"]) == {"q": 4}
    assert t.pull(queues=["q"], limit=2, timeout=0.1) == [7, 12]
    assert t.pull(queues=["q"], limit=10, timeout=0.1) == [3, 10]


def test_garbage_members_are_dropped_and_counted(
    redis_transport: RedisTransport, redis_server: RedisServer
) -> None:
    with redis_server.client() as raw:
        raw.zadd(
            redis_transport.key("q"),
            {
                "abc": 0,
                "-5": 0,
                "99999999999999999999999": 0,
                "1e5": 0,
                "": 0,
                "00000000000000000008": 1,
            },
        )
    assert redis_transport.pull(queues=["q"], limit=10, timeout=0.1) == [8]
    assert redis_transport.malformed_ids == 5


def test_namespaces_and_database_numbers_never_cross(redis_server: RedisServer) -> None:
    db1 = redis_server.url.rsplit("/", 1)[0] + "/1"
    develop = RedisTransport(redis_server.url, namespace="develop")
    productive = RedisTransport(redis_server.url, namespace="productive")
    other_db = RedisTransport(db1, namespace="develop")
    try:
        develop.push([JobHint(1, "sms", 0)])
        productive.push([JobHint(2, "sms", 0)])
        other_db.push([JobHint(3, "sms", 0)])
        assert develop.key("sms") != other_db.key("sms")
        assert productive.pull(queues=["sms"], limit=10, timeout=0.1) == [2]
        assert other_db.pull(queues=["sms"], limit=10, timeout=0.1) == [3]
        assert develop.pull(queues=["sms"], limit=10, timeout=0.1) == [1]
    finally:
        for t in (develop, productive, other_db):
            t.close()


def test_without_fallback_a_dead_server_raises(redis_server: RedisServer) -> None:
    t = RedisTransport(redis_server.url, namespace="test")
    try:
        redis_server.kill()
        with pytest.raises(errors.TransportError):
            t.pull(queues=["q"], limit=1, timeout=0.1)
        with pytest.raises(errors.TransportError):
            t.push([JobHint(1, "q", 0)])
    finally:
        t.close()


class CountingWaker:
    """A Waker that counts how often it was waited on and put to rest."""

    def __init__(self) -> None:
        self.waits = 0
        self.rests = 0

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        time.sleep(min(timeout, 0.05))
        return False

    def rest(self) -> None:
        self.rests += 1

    def close(self) -> None:
        return None


def test_falls_back_to_polling_and_returns_when_redis_answers(
    redis_server: RedisServer,
) -> None:
    waker = CountingWaker()
    t = RedisTransport(redis_server.url, namespace="test", fallback=PollingTransport(waker))
    try:
        assert t.carries_ids()
        redis_server.kill()
        started = time.monotonic()
        assert t.pull(queues=["q"], limit=1, timeout=0.5) == []
        assert time.monotonic() - started < 1.0, "fallback took longer than a second"
        assert t.fallback_active and not t.carries_ids()
        assert t.fallbacks == 1
        t.pull(queues=["q"], limit=1, timeout=0.1)  # polling waits on the fallback's waker
        assert waker.waits >= 1 and waker.rests == 0
        redis_server.start()
        wait_until(t.carries_ids, timeout=15, what="switch back to Redis")
        assert not t.fallback_active
        assert waker.rests == 1  # the fallback stops listening while Redis carries the ids
        t.push([JobHint(5, "q", 0)])
        assert t.pull(queues=["q"], limit=1, timeout=1) == [5]
    finally:
        t.close()


def test_eviction_policy_is_read(
    redis_server: RedisServer, redis_transport: RedisTransport
) -> None:
    assert redis_transport.eviction_policy() == "noeviction"
    with redis_server.client() as raw:
        raw.config_set("maxmemory-policy", "allkeys-lru")
    assert redis_transport.eviction_policy() == "allkeys-lru"


def test_password_comes_from_the_url(tmp_path: Path) -> None:
    (tmp_path / "auth").mkdir()
    server = RedisServer(tmp_path / "auth", password="s3cret")
    try:
        good = RedisTransport(server.url, namespace="auth")
        wrong = RedisTransport(server.url.replace("s3cret", "wrong"), namespace="auth")
        try:
            good.push([JobHint(1, "q", 0)])
            assert good.pull(queues=["q"], limit=1, timeout=0.1) == [1]
            with pytest.raises(errors.TransportError):
                wrong.push([JobHint(2, "q", 0)])
        finally:
            good.close()
            wrong.close()
    finally:
        server.stop()
