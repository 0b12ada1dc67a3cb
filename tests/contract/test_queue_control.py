"""The QueueControl contract on every database: a paused queue keeps accepting jobs while
claims skip it; pausing and resuming are idempotent; latency is the age of the oldest due job."""

from __future__ import annotations

import sqlalchemy as sa

from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.queues import SqlQueueControls
from tests.contract.conftest import new_job
from tests.helpers import wait_until


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
