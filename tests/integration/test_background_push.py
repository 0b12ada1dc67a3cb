"""Hints sent without making ``enqueue`` wait for Redis, by the producer's own thread
(``REDIS_PUSH=background``) or written with their replies read later (``pipelined``, the
default): ``enqueue`` returns once the job committed; a hint that never reaches Redis costs
latency, never the job; hints still waiting when the process exits are sent first."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.store.engine import create_engine
from ledgerq.store.tables import jobs
from tests.helpers import enqueue_in_a_script, running_worker, wait_until
from tests.redis_server import RedisServer


@pytest.fixture(params=["pipelined", "background"])
def app(
    request: pytest.FixtureRequest, database_url: str, redis_server: RedisServer
) -> Iterator[LedgerQ]:
    application = LedgerQ(
        database_url=database_url,
        redis_url=redis_server.url,
        namespace="bp",
        redis_push=request.param,
    )
    ran: list[int] = []
    lock = threading.Lock()

    @application.task(name="work")
    def work(ctx: JobContext, n: int) -> None:
        with lock:
            ran.append(n)

    application.ran = ran  # type: ignore[attr-defined]
    yield application
    application.close()


def hinted(server: RedisServer, queue: str = "default") -> list[int]:
    with server.client() as raw:
        return [int(m) for m in raw.zrange(f"bp:0:queue:{queue}", 0, -1)]


def committed_states(database_url: str, ids: list[int]) -> list[str]:
    """The jobs' states as a connection of its own sees them (only committed rows)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(ids)).order_by(jobs.c.id)
            ).all()
    finally:
        engine.dispose()
    return [row.state for row in rows]


def test_enqueue_returns_committed_while_redis_does_not_answer(
    app: LedgerQ, redis_server: RedisServer, database_url: str
) -> None:
    app.client.enqueue([app.client.build("work", (0,))])  # the pool's connection is open
    assert app.client.flush_hints(10)
    redis_server.pause()
    try:
        # Redis answers nothing now: an inline push would wait for its reply (and fail after
        # the socket timeout, losing the hint). These return once their rows committed.
        ids = [app.client.enqueue([app.client.build("work", (n,))])[0].job_id for n in (1, 2)]
        bulk = [h.job_id for h in app.client.enqueue([app.client.build("work", (3,))] * 3)]
        assert committed_states(database_url, ids + bulk) == ["queued"] * 5
        assert not app.client.flush_hints(0.05)  # still waiting for Redis
    finally:
        redis_server.resume()
    assert app.client.flush_hints(10)
    assert app.client.unannounced == 0
    assert set(ids + bulk) <= set(hinted(redis_server))


def test_hints_lost_on_the_way_cost_no_job(
    app: LedgerQ, redis_server: RedisServer, database_url: str
) -> None:
    redis_server.kill()
    handles = app.client.enqueue([app.client.build("work", (n,)) for n in range(5)])
    single = app.client.enqueue([app.client.build("work", (5,))])[0]
    assert app.client.flush_hints(10)
    assert app.client.unannounced == 6  # every hint lost: Redis was down
    redis_server.start()  # empty: it never heard of these jobs
    assert hinted(redis_server) == []
    # The redis driver finds them in the ledger: an idle worker claims by query after an empty
    # pull (the reconciler, off here, would re-send their ids after REQUEUE_AFTER).
    with running_worker(app, concurrency=2, poll_interval_seconds=0.2, reconcile=False):
        wait_until(lambda: len(app.ran) == 6, timeout=30, what="all six jobs run")  # type: ignore[attr-defined]
    assert sorted(app.ran) == list(range(6))  # type: ignore[attr-defined]
    ids = [h.job_id for h in handles] + [single.job_id]
    assert committed_states(database_url, ids) == ["succeeded"] * 6


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_hints_waiting_at_exit_are_sent_first(database_url: str, redis_server: RedisServer) -> None:
    # The push is slowed, so the script ends while its hint is still waiting; without the
    # flush at exit the daemon thread would die with it and the hint be lost.
    slow_push = (
        "import time\n"
        "transport = app.client._transport\n"
        "push = transport.push\n"
        "def slow_push(hints):\n"
        "    time.sleep(0.5)\n"
        "    push(hints)\n"
        "transport.push = slow_push\n"
    )
    job_id = enqueue_in_a_script(
        database_url, redis_server.url, namespace="bp", redis_push="background", before=slow_push
    )
    assert hinted(redis_server) == [job_id]


def test_inline_push_is_sent_before_enqueue_returns(
    database_url: str, redis_server: RedisServer
) -> None:
    app = LedgerQ(
        database_url=database_url, redis_url=redis_server.url, namespace="bp", redis_push="inline"
    )
    try:

        @app.task(name="work")
        def work(ctx: JobContext, n: int) -> None: ...

        job_id = work.enqueue(1).job_id
        assert hinted(redis_server) == [job_id]  # no flush: sent before enqueue returned
    finally:
        app.close()
