"""``REDIS_PUSH=pipelined`` (the default): a producer writes its hints to a Redis connection of
its own right after the commit and reads the replies later. The hints arrive without a flush,
the unread replies stay bounded, a Redis that stops answering holds an enqueue up for at most
the push timeout (then pushes are skipped until it answers again), and a refused command's
hints are counted unsent."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ledgerq import LedgerQ
from ledgerq.core.bulk import HintBatch
from ledgerq.core.job import JobHint
from ledgerq.transport.redis import RedisTransport
from ledgerq.transport.redis_push import PUSH_TIMEOUT_SECONDS, READ_AFTER_SECONDS, READ_EVERY
from tests.helpers import enqueue_in_a_script, wait_until
from tests.redis_server import RedisServer


def hinted(server: RedisServer, namespace: str = "pp", queue: str = "default") -> list[int]:
    with server.client() as raw:
        return [int(m) for m in raw.zrange(f"{namespace}:0:queue:{queue}", 0, -1)]


@pytest.fixture
def transport(redis_server: RedisServer) -> Iterator[RedisTransport]:
    found = RedisTransport(redis_server.url, namespace="pp")
    yield found
    found.close()


def hints(*ids: int) -> list[JobHint]:
    return [JobHint(job_id=i, queue="default") for i in ids]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_hints_arrive_without_a_flush(database_url: str, redis_server: RedisServer) -> None:
    app = LedgerQ(database_url=database_url, redis_url=redis_server.url, namespace="pp")
    try:

        @app.task(name="work")
        def work(ctx: object, n: int) -> None: ...

        ids = [work.enqueue(n).job_id for n in range(3)]
        ids += [h.job_id for h in work.enqueue_many([(n,) for n in range(3, 8)])]
        # Written before enqueue returned; Redis applies them without anyone reading replies.
        wait_until(lambda: hinted(redis_server) == sorted(ids), timeout=10, what="8 hints")
        assert app.client.flush_hints(10)
        assert app.client.unannounced == 0
    finally:
        app.close()


def test_unread_replies_stay_bounded(transport: RedisTransport, redis_server: RedisServer) -> None:
    sender = transport.pipelined_sender(max_outstanding=8)
    for job_id in range(1, 101):
        sender.submit(hints(job_id))
        assert sender.waiting <= 8
    assert sender.flush(10)
    assert sender.waiting == 0
    assert sender.unsent == 0
    assert hinted(redis_server) == list(range(1, 101))
    sender.close()


def test_hints_land_with_their_priority_in_their_queues_set(
    transport: RedisTransport, redis_server: RedisServer
) -> None:
    # The push writes its own wire bytes: every member must reach the right set, as the
    # score the worker's pop orders by, however the hints mix queues and priorities.
    sender = transport.pipelined_sender()
    bulk = HintBatch(list(range(1, 2_501)), "mail", 3)  # three commands of PUSH_CHUNK at most
    mixed = [
        JobHint(9_001, "mail", -2),
        JobHint(9_002, "sms", 0),
        JobHint(9_003, "sms", 7),
        JobHint(9_002, "sms", 5),  # given twice in one call: its last priority wins
        JobHint(9_004, "prüfung ✓", 1),
    ]
    sender.submit(bulk)
    sender.submit(mixed)
    assert sender.flush(10) and sender.unsent == 0 and sender.waiting == 0
    with redis_server.client() as raw:

        def scores(queue: str) -> dict[int, float]:
            key = f"pp:0:queue:{queue}"
            return {int(m): s for m, s in raw.zrange(key, 0, -1, withscores=True)}

        assert scores("mail") == {**dict.fromkeys(range(1, 2_501), 3.0), 9_001: -2.0}
        assert scores("sms") == {9_002: 5.0, 9_003: 7.0}
        assert scores("prüfung ✓") == {9_004: 1.0}
    sender.close()


def test_replies_are_read_in_batches(transport: RedisTransport, redis_server: RedisServer) -> None:
    # Polling for replies at every submit cost a fifth of the push: below a batch, none does.
    sender = transport.pipelined_sender()
    for job_id in range(1, READ_EVERY + 1):
        sender.submit(hints(job_id))
    wait_until(
        lambda: hinted(redis_server) == list(range(1, READ_EVERY + 1)),
        timeout=10,
        what="the first batch's hints",
    )
    assert sender.waiting == READ_EVERY  # all applied, no reply read yet
    next_id = iter(range(READ_EVERY + 1, 10 * READ_EVERY))

    def batch_read() -> bool:  # once the replies are in, the next submit reads them
        sender.submit(hints(next(next_id)))
        return sender.waiting < READ_EVERY

    wait_until(batch_read, timeout=10, what="a submit that reads the batch's replies")
    assert sender.flush(10) and sender.unsent == 0
    sender.close()


def test_old_replies_are_read_before_the_next_write(
    transport: RedisTransport, redis_server: RedisServer
) -> None:
    # A write that fails counts the unconfirmed hints unsent: the old ones are confirmed first.
    sender = transport.pipelined_sender()
    sender.submit(hints(1))
    written = time.monotonic()
    wait_until(lambda: hinted(redis_server) == [1], timeout=10, what="the first hint")
    wait_until(
        lambda: time.monotonic() > written + 2 * READ_AFTER_SECONDS,
        timeout=10,
        what="the first reply to grow old",
    )
    sender.submit(hints(2))
    assert sender.waiting == 1  # the first reply read, the second not yet
    assert sender.flush(10) and sender.unsent == 0
    sender.close()


def test_a_redis_that_stops_answering_holds_a_push_up_for_the_timeout_at_most(
    transport: RedisTransport, redis_server: RedisServer
) -> None:
    sender = transport.pipelined_sender(max_outstanding=4)
    sender.submit(hints(1))
    assert sender.flush(10)
    redis_server.pause()
    try:
        for job_id in range(2, 6):  # written into the socket; no reply is read yet
            started = time.monotonic()
            sender.submit(hints(job_id))
            assert time.monotonic() - started < PUSH_TIMEOUT_SECONDS / 2
        assert not sender.flush(0.05)  # the replies do not come
        started = time.monotonic()
        sender.submit(hints(6))  # past the bound: reads, gives up after the push timeout
        held = time.monotonic() - started
        assert PUSH_TIMEOUT_SECONDS * 0.9 <= held < PUSH_TIMEOUT_SECONDS + 2
        assert sender.unsent == 5 and sender.waiting == 0
        started = time.monotonic()
        sender.submit(hints(7))  # Redis is marked down: skipped at once, counted
        assert time.monotonic() - started < 0.1
        assert sender.unsent == 6
    finally:
        redis_server.resume()

    def sent_again() -> bool:  # once the outage probe is due, pushes go out again
        sender.submit(hints(8))
        return sender.flush(1) and 8 in hinted(redis_server)

    wait_until(sent_again, timeout=20, what="a push after Redis answers again")
    sender.close()


def test_a_refused_command_counts_its_hints_unsent(
    transport: RedisTransport, redis_server: RedisServer
) -> None:
    with redis_server.client() as raw:
        raw.set("pp:0:queue:default", "not a sorted set")  # ZADD gets WRONGTYPE
    sender = transport.pipelined_sender()
    sender.submit(hints(1, 2))
    assert sender.flush(10)
    assert sender.unsent == 2
    sender.close()


def test_after_close_hints_are_counted_unsent(
    transport: RedisTransport, redis_server: RedisServer
) -> None:
    sender = transport.pipelined_sender()
    sender.submit(hints(1))
    sender.close()
    assert hinted(redis_server) == [1]  # close read its reply first
    sender.submit(hints(2))
    assert sender.unsent == 1
    assert hinted(redis_server) == [1]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_script_that_exits_right_after_enqueue_leaves_its_hint(
    database_url: str, redis_server: RedisServer
) -> None:
    # No close(): the hint must still arrive. (The exit hook reads the replies first, which a
    # remote Redis needs; on loopback the write alone arrives, so this cannot tell the hook.)
    job_id = enqueue_in_a_script(
        database_url, redis_server.url, namespace="pp", redis_push="pipelined"
    )
    assert hinted(redis_server) == [job_id]
