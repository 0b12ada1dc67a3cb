"""The QueueControl contract on every database: a paused queue keeps accepting jobs while
claims skip it; pausing and resuming are idempotent; latency is the age of the oldest due job;
the per-minute history counts the jobs that finished in each of the last minutes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.queues import SqlQueueControls
from ledgerq.store.tables import jobs
from tests.contract.conftest import new_job
from tests.helpers import wait_until

S = JobState


def test_a_paused_queue_accepts_jobs_but_gives_none_to_claims(engine: sa.Engine) -> None:
    controls, store = SqlQueueControls(engine), SqlJobStore(engine)
    controls.pause_queue("a")
    controls.pause_queue("a")  # a no-op
    assert controls.paused_queues() == {"a"}
    (job,) = store.insert_jobs([new_job("a")])
    store.insert_jobs([new_job("b")])
    claimed = store.claim_jobs(queues=["a", "b"], worker_id="w", limit=10, lease_seconds=30)
    assert [j.queue for j in claimed] == ["b"]
    assert store.claim_jobs(queues=["a"], worker_id="w", limit=10, lease_seconds=30) == []
    assert store.get_job(job.job_id).state is JobState.QUEUED
    controls.resume_queue("a")
    controls.resume_queue("a")  # a no-op
    assert controls.paused_queues() == set()
    (again,) = store.claim_jobs(queues=["a"], worker_id="w", limit=10, lease_seconds=30)
    assert again.id == job.job_id


def test_latency_is_the_age_of_the_oldest_due_queued_job_per_queue(engine: sa.Engine) -> None:
    controls, store = SqlQueueControls(engine), SqlJobStore(engine)
    assert controls.queue_latency_seconds() == {}
    store.insert_jobs([new_job("a"), new_job("a")])
    latency = wait_until(lambda: controls.queue_latency_seconds().get("a", 0) > 0.1)
    assert 0.1 < latency < 30
    store.claim_jobs(queues=["a"], worker_id="w", limit=10, lease_seconds=30)
    assert controls.queue_latency_seconds() == {}  # nothing queued any more


def test_finished_per_minute_counts_final_states_in_the_window_oldest_first(
    engine: sa.Engine,
) -> None:
    controls, store = SqlQueueControls(engine), SqlJobStore(engine)
    empty = controls.finished_per_minute(minutes=5)
    assert len(empty) == 5 and all(m.succeeded == m.dead == m.cancelled == 0 for m in empty)
    results = store.insert_jobs([new_job("a") for _ in range(6)])
    claimed = store.claim_jobs(queues=["a"], worker_id="w", limit=5, lease_seconds=30)
    outcomes = [S.SUCCEEDED, S.SUCCEEDED, S.SUCCEEDED, S.DEAD, S.FAILED]
    done = [
        Completion(Claim(job.id, job.attempt), state, error_json='{"kind":"exception"}')
        for job, state in zip(claimed, outcomes, strict=True)
    ]
    assert store.complete_jobs(done) == [True] * 5
    store.cancel_job(results[5].job_id)
    # A job that finished two hours ago lies outside the window.
    (old,) = store.insert_jobs([new_job("a")])
    (job,) = store.claim_jobs(queues=["a"], worker_id="w", limit=1, lease_seconds=30)
    store.complete_jobs([Completion(Claim(job.id, job.attempt), S.SUCCEEDED)])
    long_ago = store.dialect.bind_time(datetime.now(UTC) - timedelta(hours=2))
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == old.job_id).values(finished_at=long_ago))

    history = controls.finished_per_minute(minutes=5)
    assert len(history) == 5
    starts = [m.minute_at for m in history]
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(starts))
    assert timedelta(0) <= datetime.now(UTC) - starts[-1] < timedelta(minutes=1, seconds=5)
    # A failed attempt (retried later) has not finished; the old job is out of the window.
    totals = (sum(m.succeeded for m in history), sum(m.dead for m in history))
    assert totals == (3, 1) and sum(m.cancelled for m in history) == 1
    with pytest.raises(ValueError, match="minutes must be 1 to 1440"):
        controls.finished_per_minute(minutes=0)
