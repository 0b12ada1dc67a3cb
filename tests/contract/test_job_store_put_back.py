"""The JobStore contract of the put-back at a graceful stop (``requeue_jobs``): an attempt
whose body started keeps its cost, one that never started (prefetched) costs nothing, as a
postponed claim. On every database (see ``test_job_store.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.core.job import Claim, Job, NewJob
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import job_assignments

S = JobState


@pytest.fixture
def store(engine: sa.Engine) -> SqlJobStore:
    return SqlJobStore(engine)


def running(store: SqlJobStore, count: int, max_attempts: int = 1) -> list[Job]:
    new = NewJob(task="t", queue="q", args_json="[]", max_attempts=max_attempts)
    store.insert_jobs([new] * count)
    found = store.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=30)
    assert len(found) == count
    return sorted(found, key=lambda j: j.id)


def cost(store: SqlJobStore, job_id: int) -> tuple[Any, ...]:
    job = store.get_job(job_id)
    return (job.state, job.attempt, job.max_attempts, job.postponed, job.runs, job.max_runs)


def test_an_unstarted_put_back_costs_no_attempt_and_a_started_one_keeps_it(
    store: SqlJobStore,
) -> None:
    ran, waited, also_waited = running(store, 3)
    claims = [Claim(j.id, j.attempt) for j in (ran, waited, also_waited)]
    unstarted = claims[1:]
    # Given out of id order: the flags answer in the caller's order.
    assert store.requeue_jobs(claims[::-1], unstarted=unstarted) == [True, True, True]
    assert cost(store, ran.id) == (S.QUEUED, 1, 1, 0, 1, 1)
    for job in (waited, also_waited):
        assert cost(store, job.id) == (S.QUEUED, 1, 2, 1, 0, 1)
    # Fenced: a repeat changes nothing, the unstarted claim is not counted twice.
    assert store.requeue_jobs(unstarted, unstarted=unstarted) == [False, False]
    assert cost(store, waited.id) == (S.QUEUED, 1, 2, 1, 0, 1)
    # The next claim is the first run of the unstarted ones: its attempt counts, and the
    # fencing token still never drops.
    again = {
        j.id: j for j in store.claim_jobs(queues=["q"], worker_id="w2", limit=3, lease_seconds=30)
    }
    assert (again[waited.id].attempt, again[waited.id].runs, again[waited.id].max_runs) == (
        2,
        1,
        1,
    )
    assert (again[ran.id].attempt, again[ran.id].runs, again[ran.id].max_runs) == (2, 2, 1)


def test_both_put_backs_close_their_attempt_as_requeued_in_the_history(
    store: SqlJobStore,
) -> None:
    ran, waited = running(store, 2, max_attempts=3)
    claims = [Claim(j.id, j.attempt) for j in (ran, waited)]
    assert store.requeue_jobs(claims, unstarted=[claims[1]]) == [True, True]
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                job_assignments.c.job_id,
                job_assignments.c.attempt,
                job_assignments.c.worker_id,
                job_assignments.c.outcome,
            ).order_by(job_assignments.c.job_id)
        ).all()
    assert [tuple(r) for r in rows] == [
        (ran.id, 1, "w", "requeued"),
        (waited.id, 1, "w", "requeued"),
    ]
