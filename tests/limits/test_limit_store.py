"""The LimitStore and RateLimitBackend contracts against SQLite, PostgreSQL and MariaDB, and
the Redis rate limiter against a private redis-server. Two store instances (two engines) stand
for two processes sharing the limits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ledgerq.core import errors
from ledgerq.core import limits as lim
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.limits import SqlLimitStore
from ledgerq.transport.redis import RedisRateLimiter
from tests.redis_server import RedisServer

BREAKER = lim.Breaker(failures=2, reset_after=0.5)


@pytest.fixture
def stores(database_url: str) -> Iterator[tuple[SqlJobStore, SqlLimitStore, SqlLimitStore]]:
    engines = [create_engine(database_url), create_engine(database_url)]
    yield SqlJobStore(engines[0]), SqlLimitStore(engines[0]), SqlLimitStore(engines[1])
    for engine in engines:
        engine.dispose()


def claim_jobs(jobs: SqlJobStore, count: int, max_attempts: int = 3) -> list[Claim]:
    new = [NewJob(task="t", queue="q", args_json="[]", max_attempts=max_attempts)] * count
    jobs.insert_jobs(new)
    claimed = jobs.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=30)
    assert len(claimed) == count
    return [Claim(j.id, j.attempt) for j in claimed]


def check_window(first: object, second: object) -> None:
    """5 per 5 s with a burst of 5, shared by two clients: five go at once, the 6th is
    denied for up to one interval (1 s), then admitted."""
    rate = lim.Rate(5, 5.0, burst=5)
    allowed = [
        (first if i % 2 else second).acquire_rate(name="rate:t", rate=rate)  # type: ignore[attr-defined]
        for i in range(5)
    ]
    assert all(d.allowed for d in allowed)
    denied = first.acquire_rate(name="rate:t", rate=rate)  # type: ignore[attr-defined]
    assert not denied.allowed and 0 < denied.retry_after_seconds <= 1.0
    assert second.acquire_rate(name="rate:other", rate=rate).allowed  # type: ignore[attr-defined]
    time.sleep(denied.retry_after_seconds + 0.05)
    assert second.acquire_rate(name="rate:t", rate=rate).allowed  # type: ignore[attr-defined]


def hammer(limiters: list[object], rate: lim.Rate, enough: int) -> list[float]:
    """Threads over ``limiters`` ask as fast as they can until ``enough`` were admitted (or a
    generous deadline passed: a stalled database then shows as too few); return the times."""
    admitted: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 30

    def ask(limiter: object) -> None:
        while time.monotonic() < deadline:
            if limiter.acquire_rate(name="rate:hot", rate=rate).allowed:  # type: ignore[attr-defined]
                with lock:
                    admitted.append(time.monotonic())
            with lock:
                if len(admitted) >= enough:
                    return

    threads = [threading.Thread(target=ask, args=(lim_,)) for lim_ in limiters * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(admitted)


def max_in_window(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_database_rate_window_is_shared(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    _, first, second = stores
    check_window(first, second)


def test_database_rate_limit_holds_under_contention(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    _, first, second = stores
    admitted = hammer([first, second], lim.Rate(5, 0.5), enough=11)
    # The window renews: 11 admissions need three windows of 0.5 s, so they span at least 1 s.
    # The times are taken by the client after each answer, so a loaded machine blurs them:
    # the bounds leave room for that, and a limiter that did not hold would break them by far.
    assert len(admitted) >= 11
    assert admitted[-1] - admitted[0] >= 0.7
    assert max_in_window(admitted, 0.3) <= 5


def test_redis_rate_window_is_shared_and_holds(redis_server: RedisServer) -> None:
    first = RedisRateLimiter(redis_server.url, namespace="limits-test")
    second = RedisRateLimiter(redis_server.url, namespace="limits-test")
    try:
        check_window(first, second)
        admitted = hammer([first, second], lim.Rate(50, 0.5), enough=101)
        assert len(admitted) >= 101
        assert admitted[-1] - admitted[0] >= 0.7  # three windows of 0.5 s
        assert max_in_window(admitted, 0.3) <= 50
    finally:
        first.close()
        second.close()


def test_rates_fall_back_to_the_database_when_redis_is_down(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore], redis_server: RedisServer
) -> None:
    _, store, _ = stores
    limiter = RedisRateLimiter(redis_server.url, namespace="limits-test")
    redis_server.kill()
    with pytest.raises(errors.TransportError):
        limiter.acquire_rate(name="rate:x", rate=lim.Rate(1, 60))
    rates = lim.FallbackRates(limiter, store)
    assert rates.acquire_rate(name="rate:x", rate=lim.Rate(1, 60)).allowed
    assert rates.fallback_active
    assert not rates.acquire_rate(name="rate:x", rate=lim.Rate(1, 60)).allowed
    limiter.close()


def test_concurrency_slots(stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore]) -> None:
    jobs, first, second = stores
    a, b, c = claim_jobs(jobs, 3)
    assert first.acquire_slot(name="concurrency:t", limit=2, claim=a)
    assert second.acquire_slot(name="concurrency:t", limit=2, claim=b)
    assert not first.acquire_slot(name="concurrency:t", limit=2, claim=c)
    assert first.acquire_slot(name="concurrency:t", limit=2, claim=a)  # held already
    assert second.acquire_slot(name="concurrency:other", limit=1, claim=c)
    assert first.count_slots("concurrency:t") == 2
    first.release_slot(name="concurrency:t", claim=a)
    assert second.acquire_slot(name="concurrency:t", limit=2, claim=c)
    assert not first.acquire_slot(name="concurrency:t", limit=2, claim=a)


def test_slot_of_an_attempt_that_stopped_running_is_freed(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    jobs, first, second = stores
    a, b = claim_jobs(jobs, 2)
    assert first.acquire_slot(name="concurrency:t", limit=1, claim=a)
    assert not second.acquire_slot(name="concurrency:t", limit=1, claim=b)
    # What a failover does to a dead worker's job: back to queued, the attempt over.
    assert jobs.requeue_jobs([a]) == [True]
    assert second.acquire_slot(name="concurrency:t", limit=1, claim=b)


def test_postpone_keeps_the_attempt_budget(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    jobs, store, _ = stores
    (claim,) = claim_jobs(jobs, 1, max_attempts=3)
    assert store.postpone_job(claim, delay_seconds=0.2)
    job = jobs.get_job(claim.job_id)
    assert (job.state, job.attempt, job.max_attempts) == (JobState.SCHEDULED, 1, 4)
    assert job.max_attempts - job.attempt == 3  # the same budget as before the claim
    assert not store.postpone_job(claim, delay_seconds=0.2)  # fenced: the claim is spent
    assert not jobs.stage_due_jobs()  # not due yet
    time.sleep(0.3)
    assert [h.job_id for h in jobs.stage_due_jobs()] == [claim.job_id]


def test_breaker_opens_waits_trials_and_closes(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    _, first, second = stores
    name = "breaker:t"
    assert first.admit_breaker(name=name, breaker=BREAKER)[0] is lim.Admission.RUN
    assert first.record_breaker(name=name, breaker=BREAKER, succeeded=True).failures == 0
    assert first.list_breakers() == []  # a clean success writes nothing
    first.record_breaker(name=name, breaker=BREAKER, succeeded=False)
    opened = second.record_breaker(name=name, breaker=BREAKER, succeeded=False)
    assert opened.state is lim.CircuitState.OPEN
    verdict, wait = first.admit_breaker(name=name, breaker=BREAKER)
    assert verdict is lim.Admission.WAIT and 0 < wait <= 0.5
    time.sleep(wait + 0.05)
    # Exactly one of two processes gets the half-open trial.
    verdicts = {
        first.admit_breaker(name=name, breaker=BREAKER)[0],
        second.admit_breaker(name=name, breaker=BREAKER)[0],
    }
    assert verdicts == {lim.Admission.TRIAL, lim.Admission.WAIT}
    (row,) = first.list_breakers()
    assert row.state is lim.CircuitState.HALF_OPEN
    reopened = second.record_breaker(name=name, breaker=BREAKER, succeeded=False)
    assert reopened.state is lim.CircuitState.OPEN
    time.sleep(0.55)
    assert first.admit_breaker(name=name, breaker=BREAKER)[0] is lim.Admission.TRIAL
    closed = first.record_breaker(name=name, breaker=BREAKER, succeeded=True)
    assert (closed.state, closed.failures) == (lim.CircuitState.CLOSED, 0)


def test_reset_breaker(stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore]) -> None:
    _, store, _ = stores
    for _ in range(2):
        store.record_breaker(name="breaker:x", breaker=BREAKER, succeeded=False)
    assert store.list_breakers()[0].state is lim.CircuitState.OPEN
    assert store.reset_breaker("breaker:x")
    assert store.list_breakers()[0].state is lim.CircuitState.CLOSED
    assert not store.reset_breaker("breaker:nope")
