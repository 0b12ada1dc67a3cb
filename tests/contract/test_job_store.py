"""The JobStore contract: the same suite against SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from tests.helpers import wait_until

S = JobState


@pytest.fixture
def store(engine: sa.Engine) -> SqlJobStore:
    return SqlJobStore(engine)


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(task="t", queue=queue, args_json='{"args":[],"kwargs":{}}', **kw)  # type: ignore[arg-type]


def test_insert_returns_ids_in_order_and_jobs_start_queued(store: SqlJobStore) -> None:
    results = store.insert_jobs([new(priority=i) for i in range(5)])
    ids = [r.job_id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 5
    for i, job_id in enumerate(ids):
        job = store.get_job(job_id)
        assert (job.state, job.priority, job.attempt) == (S.QUEUED, i, 0)


def test_claim_takes_priority_then_age_and_increments_attempt(store: SqlJobStore) -> None:
    low, high, high_later = (
        r.job_id for r in store.insert_jobs([new(priority=5), new(priority=1), new(priority=1)])
    )
    claimed = store.claim_jobs(queues=["q"], worker_id="w", limit=2, lease_seconds=30)
    assert [j.id for j in claimed] == [high, high_later]
    assert all(j.state is S.RUNNING and j.attempt == 1 and j.worker_id == "w" for j in claimed)
    assert all(
        j.lease_expires_at and j.heartbeat_at and j.lease_expires_at > j.heartbeat_at
        for j in claimed
    )
    assert store.get_job(low).state is S.QUEUED


def test_claim_only_takes_the_given_queues_and_due_jobs(store: SqlJobStore) -> None:
    store.insert_jobs([new("a"), new("b"), new("a", delay_seconds=60)])
    claimed = store.claim_jobs(queues=["a"], worker_id="w", limit=10, lease_seconds=30)
    assert [j.queue for j in claimed] == ["a"]
    assert store.claim_jobs(queues=["a"], worker_id="w", limit=10, lease_seconds=30) == []


def test_a_job_is_claimed_by_exactly_one_of_many_concurrent_claimers(store: SqlJobStore) -> None:
    import threading

    ids = {r.job_id for r in store.insert_jobs([new() for _ in range(200)])}
    got: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        while True:
            jobs = store.claim_jobs(queues=["q"], worker_id=f"w{n}", limit=7, lease_seconds=30)
            if not jobs:
                return
            with lock:
                got.extend(j.id for j in jobs)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(ids)


def test_completion_is_fenced_on_attempt_and_state(store: SqlJobStore) -> None:
    (job_id,) = (r.job_id for r in store.insert_jobs([new()]))
    first = store.claim_jobs(queues=["q"], worker_id="old", limit=1, lease_seconds=30)[0]
    # Simulate a failover: the job goes back to the queue and another worker claims it.
    assert store.requeue_jobs([Claim(job_id, first.attempt)]) == [True]
    second = store.claim_jobs(queues=["q"], worker_id="new", limit=1, lease_seconds=30)[0]
    assert second.attempt == first.attempt + 1
    stale = Completion(Claim(job_id, first.attempt), S.SUCCEEDED, result_json='"old"')
    fresh = Completion(Claim(job_id, second.attempt), S.SUCCEEDED, result_json='"new"')
    assert store.heartbeat_jobs([Claim(job_id, first.attempt)], lease_seconds=30) == [False]
    assert store.complete_jobs([stale, fresh]) == [False, True]
    job = store.get_job(job_id)
    assert (job.state, job.result_json, job.attempt) == (S.SUCCEEDED, '"new"', 2)
    # A late write after the job finished is refused too.
    assert store.complete_jobs([fresh]) == [False]


def test_failed_attempt_waits_for_its_backoff_then_is_staged(store: SqlJobStore) -> None:
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    failure = Completion(
        job_id_claim := Claim(job.id, job.attempt),
        S.FAILED,
        error_json='{"kind":"exception"}',
        retry_delay_seconds=0.3,
    )
    assert store.complete_jobs([failure]) == [True]
    failed = store.get_job(job_id_claim.job_id)
    assert failed.state is S.FAILED and failed.run_at > job.claimed_at  # type: ignore[operator]
    assert store.stage_due_jobs() == []
    wait_until(lambda: len(store.stage_due_jobs()) == 1, timeout=5)
    again = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
    assert [(j.id, j.attempt) for j in again] == [(job.id, 2)]


def test_dead_and_cancelled_jobs_can_be_retried_but_succeeded_cannot(store: SqlJobStore) -> None:
    a, b = (r.job_id for r in store.insert_jobs([new(), new()]))
    claimed = {
        j.id: j for j in store.claim_jobs(queues=["q"], worker_id="w", limit=2, lease_seconds=30)
    }
    store.complete_jobs(
        [
            Completion(Claim(a, claimed[a].attempt), S.DEAD, error_json="{}"),
            Completion(Claim(b, claimed[b].attempt), S.SUCCEEDED),
        ]
    )
    assert store.retry_job(a).state is S.QUEUED
    with pytest.raises(errors.InvalidTransition):
        store.retry_job(b)
    assert store.cancel_job(a).state is S.CANCELLED
    with pytest.raises(errors.InvalidTransition):
        store.cancel_job(a)
    with pytest.raises(errors.JobNotFound):
        store.cancel_job(10_000_000)


def test_cancelling_a_running_job_refuses_its_completion(store: SqlJobStore) -> None:
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    store.cancel_job(job.id)
    assert store.complete_jobs([Completion(Claim(job.id, job.attempt), S.SUCCEEDED)]) == [False]
    assert store.get_job(job.id).state is S.CANCELLED


def test_dedupe_key_is_unique_among_unfinished_jobs_only(store: SqlJobStore) -> None:
    first = store.insert_jobs([new(dedupe_key="k")])[0]
    again = store.insert_jobs([new(dedupe_key="k")])[0]
    assert again.duplicate and again.job_id == first.job_id
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    store.complete_jobs([Completion(Claim(job.id, job.attempt), S.SUCCEEDED)])
    after = store.insert_jobs([new(dedupe_key="k")])[0]
    assert not after.duplicate and after.job_id != first.job_id


def test_insert_inside_a_rolled_back_transaction_leaves_no_job(store: SqlJobStore) -> None:
    with store.engine.connect() as conn:
        trans = conn.begin()
        store.insert_jobs([new(), new(dedupe_key="x")], connection=conn)
        trans.rollback()
    assert store.list_jobs() == []
    with store.engine.connect() as conn, conn.begin():
        store.insert_jobs([new()], connection=conn)
    assert len(store.list_jobs()) == 1


def test_heartbeat_extends_the_lease_from_the_database_clock(store: SqlJobStore) -> None:
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=5)[0]
    assert store.heartbeat_jobs([Claim(job.id, job.attempt)], lease_seconds=100) == [True]
    renewed = store.get_job(job.id)
    assert renewed.lease_expires_at is not None and job.lease_expires_at is not None
    assert (renewed.lease_expires_at - job.lease_expires_at).total_seconds() > 90


def test_counts_and_list_filters(store: SqlJobStore) -> None:
    store.insert_jobs([new("a"), new("a"), new("b", held=True)])
    counts = store.count_jobs()
    assert counts == {("a", S.QUEUED): 2, ("b", S.HELD): 1}
    assert [j.queue for j in store.list_jobs(state=S.HELD)] == ["b"]
    assert len(store.list_jobs(queue="a", limit=1)) == 1


def test_results_and_errors_round_trip_as_text(store: SqlJobStore) -> None:
    big = json.dumps({"rows": ["x" * 100] * 1000})
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    store.complete_jobs([Completion(Claim(job.id, job.attempt), S.SUCCEEDED, result_json=big)])
    assert store.get_job(job.id).result_json == big


def test_store_reports_unreachable_database_as_store_unavailable() -> None:
    engine = create_engine("postgresql://nobody@127.0.0.1:1/none")
    store = SqlJobStore(engine)
    with pytest.raises(errors.StoreUnavailable):
        store.get_job(1)
    # The hot path (psycopg directly) too: a worker's threads retry on StoreUnavailable.
    with pytest.raises(errors.StoreUnavailable):
        store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
    with pytest.raises(errors.StoreUnavailable):
        store.complete_jobs([Completion(Claim(1, 1), JobState.SUCCEEDED)])
    with pytest.raises(errors.StoreUnavailable):
        store.insert_jobs([NewJob(task="t", queue="q", args_json="[]")])
