"""The JobStore contract: the same suite against SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import Claim, EnqueueResult, JobHint, NewJob
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
    # Both attempts in one group: each entry is fenced on its own attempt, in either order.
    both = [Claim(job_id, first.attempt), Claim(job_id, second.attempt)]
    assert store.heartbeat_jobs(both, lease_seconds=30) == [False, True]
    assert store.heartbeat_jobs(both[::-1], lease_seconds=30) == [True, False]
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


def test_on_commit_runs_once_the_rows_committed_and_never_after_a_rollback(
    store: SqlJobStore,
) -> None:
    seen: list[list[int]] = []

    def record(results: list[EnqueueResult]) -> None:
        seen.append([r.job_id for r in results])

    (alone,) = store.insert_jobs([new()], on_commit=record)
    assert seen == [[alone.job_id]]
    with store.engine.connect() as conn:
        with conn.begin():
            (inside,) = store.insert_jobs([new()], connection=conn, on_commit=record)
            assert len(seen) == 1  # not before the caller's commit
        assert seen == [[alone.job_id], [inside.job_id]]
        trans = conn.begin()
        store.insert_jobs([new()], connection=conn, on_commit=record)
        trans.rollback()
    assert len(seen) == 2


def claimed_ids(store: SqlJobStore) -> list[int]:
    jobs = store.claim_jobs(queues=["q"], worker_id="w", limit=5, lease_seconds=30)
    return [job.id for job in jobs]


def test_delayed_jobs_are_staged_when_due_and_held_ones_only_when_started(
    store: SqlJobStore,
) -> None:
    delayed, held = (r.job_id for r in store.insert_jobs([new(delay_seconds=0.3), new(held=True)]))
    assert store.get_job(delayed).state is S.SCHEDULED and store.get_job(held).state is S.HELD
    assert store.stage_due_jobs() == []
    (hint,) = wait_until(store.stage_due_jobs, timeout=5)
    assert (hint.job_id, hint.queue) == (delayed, "q")
    assert store.get_job(held).state is S.HELD
    assert claimed_ids(store) == [delayed]  # a held job is not claimed until started
    assert store.start_job(held).state is S.QUEUED
    assert claimed_ids(store) == [held]
    with pytest.raises(errors.InvalidTransition):
        store.start_job(held)
    with pytest.raises(errors.JobNotFound):
        store.start_job(10**9)


def test_seconds_until_due_counts_delayed_jobs_and_retries_not_held_ones(
    store: SqlJobStore,
) -> None:
    store.insert_jobs([new(held=True)])  # waits for a start, not a time
    assert store.seconds_until_due(queues=["q"]) is None
    store.insert_jobs([new(delay_seconds=60)])  # delayed at enqueue: never started
    wait = store.seconds_until_due(queues=["q"])
    assert wait is not None and 50 < wait <= 60
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    retry = Completion(
        Claim(job.id, job.attempt), S.FAILED, error_json="{}", retry_delay_seconds=30
    )
    assert store.complete_jobs([retry]) == [True]
    wait = store.seconds_until_due(queues=["q", "other"])  # the earliest: the retry
    assert wait is not None and 20 < wait <= 30
    assert store.seconds_until_due(queues=["other"]) is None


def test_requeue_is_fenced_so_a_repeat_changes_nothing(store: SqlJobStore) -> None:
    store.insert_jobs([new()])
    job = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)[0]
    claim = Claim(job.id, job.attempt)
    assert store.requeue_jobs([claim]) == [True]
    assert store.requeue_jobs([claim]) == [False]
    back = store.get_job(job.id)
    assert (back.state, back.attempt, back.worker_id) == (S.QUEUED, 1, None)
    again = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
    assert [(j.id, j.attempt) for j in again] == [(job.id, 2)]


def test_start_marks_are_fenced_and_the_first_one_stays(store: SqlJobStore) -> None:
    store.insert_jobs([new(), new(), new("other")])
    first, second = store.claim_jobs(queues=["q"], worker_id="w", limit=2, lease_seconds=30)
    store.claim_jobs(queues=["other"], worker_id="w", limit=1, lease_seconds=30)
    assert store.count_waiting_to_start() == {"q": 2, "other": 1}
    stale = Claim(second.id, second.attempt + 1)
    assert store.mark_started([(Claim(first.id, first.attempt), 5.0), (stale, 0.0)]) == [
        True,
        False,
    ]
    assert store.count_waiting_to_start() == {"q": 1, "other": 1}
    started = store.get_job(first.id).started_at
    assert started is not None and first.claimed_at is not None
    assert (first.claimed_at - started).total_seconds() > 3
    store.mark_started([(Claim(first.id, first.attempt), 0.0)])
    assert store.get_job(first.id).started_at == started


def test_hints_name_only_the_jobs_queued_now(store: SqlJobStore) -> None:
    ids = [r.job_id for r in store.insert_jobs([new(priority=3), new(priority=1), new("b")])]
    store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)  # priority 1
    hints = store.hints_for([*ids, 10_000_000])
    assert len(hints) == 2 and set(hints) == {JobHint(ids[0], "q", 3), JobHint(ids[2], "b", 0)}
    assert store.hints_for([]) == []


def test_group_writes_answer_each_item_in_the_callers_order(store: SqlJobStore) -> None:
    ids = [r.job_id for r in store.insert_jobs([new() for _ in range(4)])]
    store.claim_jobs(queues=["q"], worker_id="w", limit=4, lease_seconds=30)
    fresh = [Claim(i, 1) for i in reversed(ids)]  # not in id order
    stale = [Claim(i, 2) for i in reversed(ids)]
    mixed = [fresh[0], stale[1], fresh[2], stale[3]]
    assert store.heartbeat_jobs(mixed, lease_seconds=30) == [True, False, True, False]
    assert store.mark_started([(c, 0.0) for c in mixed]) == [True, False, True, False]
    assert store.requeue_jobs([stale[0], fresh[3]]) == [False, True]
    done = [
        Completion(fresh[1], S.SUCCEEDED, result_json="1"),
        Completion(stale[2], S.SUCCEEDED, result_json="2"),
        Completion(fresh[0], S.FAILED, error_json="{}", retry_delay_seconds=60),
        Completion(fresh[3], S.SUCCEEDED),  # requeued above: no longer running
    ]
    assert store.complete_jobs(done) == [True, False, True, False]
    states = [store.get_job(i).state for i in reversed(ids)]
    assert states == [S.FAILED, S.SUCCEEDED, S.RUNNING, S.QUEUED]


TRICKY_TEXTS = ['"quoted"', "back\\slash", "{braces},commas", "NULL", "", "ünïcode ✓", 'a\\"b']


def test_results_and_errors_of_any_text_survive_a_group_completion(store: SqlJobStore) -> None:
    count = len(TRICKY_TEXTS) + 1
    store.insert_jobs([new() for _ in range(2 * count)])
    claimed = store.claim_jobs(queues=["q"], worker_id="w", limit=2 * count, lease_seconds=30)
    texts: list[str | None] = [*TRICKY_TEXTS, None]
    results, errors_ = claimed[:count], claimed[count:]
    done = [
        *(
            Completion(Claim(job.id, job.attempt), S.SUCCEEDED, result_json=text)
            for job, text in zip(results, texts, strict=True)
        ),
        *(
            Completion(Claim(job.id, job.attempt), S.DEAD, error_json=text)
            for job, text in zip(errors_, texts, strict=True)
        ),
    ]
    # On PostgreSQL this runs the driver's one-statement group completion.
    assert store.complete_jobs(done) == [True] * 2 * count
    assert [store.get_job(job.id).result_json for job in results] == texts
    assert [store.get_job(job.id).error_json for job in errors_] == texts


def keyed(key: str, queue: str = "q", **kw: object) -> NewJob:
    return new(queue, idempotency_key=key, idempotency_for_seconds=3600.0, **kw)


def test_an_idempotency_key_creates_its_job_once_even_after_it_finished(
    store: SqlJobStore,
) -> None:
    # Mixed with plain and deduplicated jobs, ids follow the input order (a producer's order).
    first = store.insert_jobs([keyed("k1"), new(), keyed("k2"), new(dedupe_key="d"), keyed("k3")])
    ids = [r.job_id for r in first]
    assert ids == sorted(ids) and not any(r.duplicate for r in first)
    for job_id in ids:
        store.cancel_job(job_id)  # finished: the keys still point at their jobs
    again = store.insert_jobs([keyed("k1"), keyed("k4"), keyed("k3")])
    assert [r.duplicate for r in again] == [True, False, True]
    assert [again[0].job_id, again[2].job_id] == [ids[0], ids[4]]
    assert len(store.list_jobs(limit=100)) == 6


def test_racing_inserts_of_one_idempotency_key_create_one_job(store: SqlJobStore) -> None:
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def insert() -> None:
        barrier.wait()
        try:
            outcomes.append(store.insert_jobs([keyed("race-1"), keyed("race-2")]))
        except errors.StoreError as exc:  # the loser's transaction rolls back whole
            outcomes.append(exc)

    threads = [threading.Thread(target=insert) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    retried = store.insert_jobs([keyed("race-1"), keyed("race-2")])
    assert [r.duplicate for r in retried] == [True, True]
    assert len(store.list_jobs(limit=100)) == 2
    assert any(isinstance(o, list) and not any(r.duplicate for r in o) for o in outcomes)
