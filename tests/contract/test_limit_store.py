"""The LimitStore contract on every database. Two store instances (two engines) stand for two
processes sharing the limits. (The rate windows, which Redis offers too, are the
RateLimitBackend contract: test_rate_limit_backend.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from ledgerq.core import limits as lim
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.limit_store import SqlLimitStore
from tests.conftest import engine_for

BREAKER = lim.Breaker(failures=2, reset_after=0.5)


@pytest.fixture
def stores(
    engine: sa.Engine, database_url: str
) -> Iterator[tuple[SqlJobStore, SqlLimitStore, SqlLimitStore]]:
    other = engine_for(database_url)
    yield SqlJobStore(engine), SqlLimitStore(engine), SqlLimitStore(other)
    other.dispose()


def claim_jobs(jobs: SqlJobStore, count: int, max_attempts: int = 3) -> list[Claim]:
    new = [NewJob(task="t", queue="q", args_json="[]", max_attempts=max_attempts)] * count
    jobs.insert_jobs(new)
    claimed = jobs.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=30)
    assert len(claimed) == count
    return [Claim(j.id, j.attempt) for j in claimed]


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
    first.release_slot(name="concurrency:t", claim=a)  # holding none: no error
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


#: Long enough that a loaded machine (two test workers) does not see it come due between the
#: postponement and the check that it is not due yet.
POSTPONE_SECONDS = 1.0


def test_postpone_keeps_the_attempt_budget(
    stores: tuple[SqlJobStore, SqlLimitStore, SqlLimitStore],
) -> None:
    jobs, store, _ = stores
    (claim,) = claim_jobs(jobs, 1, max_attempts=3)
    assert store.postpone_job(claim, delay_seconds=POSTPONE_SECONDS)
    job = jobs.get_job(claim.job_id)
    assert (job.state, job.attempt, job.max_attempts) == (JobState.SCHEDULED, 1, 4)
    assert job.max_attempts - job.attempt == 3  # the same budget as before the claim
    # Shown as no run yet, of 3: the postponed claim is not an attempt.
    assert (job.postponed, job.runs, job.max_runs) == (1, 0, 3)
    # Fenced: the claim is spent.
    assert not store.postpone_job(claim, delay_seconds=POSTPONE_SECONDS)
    wait = jobs.seconds_until_due(queues=["q"])  # it waits to run again, like a retry
    assert wait is not None and 0 <= wait <= POSTPONE_SECONDS
    assert not jobs.stage_due_jobs()  # not due yet
    time.sleep(POSTPONE_SECONDS + 0.1)
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
