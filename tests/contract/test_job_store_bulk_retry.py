"""The JobStore contract of ``retry_dead_jobs`` (``queue requeue-failed``): dead jobs only,
filtered by queue, task and time of death, fenced, chunked, and a dry run moves nothing; on
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.requeue import DeadJobFilter
from ledgerq.core.states import JobState
from ledgerq.store import job_operations
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import jobs

S = JobState


@pytest.fixture
def store(engine: sa.Engine) -> SqlJobStore:
    return SqlJobStore(engine)


def finish(store: SqlJobStore, specs: list[tuple[str, str, JobState]]) -> list[int]:
    """Jobs of (queue, task) run once and end in the given state; their ids in order."""
    ids = [
        r.job_id
        for r in store.insert_jobs(
            [NewJob(task=t, queue=q, args_json="[]", max_attempts=1) for q, t, _ in specs]
        )
    ]
    claimed = {
        j.id: j
        for q in {q for q, _, _ in specs}
        for j in store.claim_jobs(queues=[q], worker_id="w", limit=100, lease_seconds=60)
    }
    store.complete_jobs(
        [
            Completion(Claim(i, claimed[i].attempt), state, error_json="{}")
            for i, (_, _, state) in zip(ids, specs, strict=True)
        ]
    )
    return ids


def states(store: SqlJobStore, ids: list[int]) -> list[JobState]:
    return [store.get_job(i).state for i in ids]


def test_only_dead_jobs_move_and_a_dry_run_moves_none(store: SqlJobStore) -> None:
    dead_a, dead_b, ok, cancelled, dead_mail = finish(
        store,
        [
            ("q", "t.a", S.DEAD),
            ("q", "t.b", S.DEAD),
            ("q", "t.a", S.SUCCEEDED),
            ("q", "t.a", S.CANCELLED),
            ("mail", "t.a", S.DEAD),
        ],
    )
    queued = store.insert_jobs([NewJob(task="t.a", queue="q", args_json="[]")])[0].job_id
    everything = [dead_a, dead_b, ok, cancelled, dead_mail, queued]
    before = states(store, everything)

    dry = store.retry_dead_jobs(DeadJobFilter(), dry_run=True)
    assert dry.dry_run and dry.counts == {("q", "t.a"): 1, ("q", "t.b"): 1, ("mail", "t.a"): 1}
    assert states(store, everything) == before  # nothing moved

    by_queue = store.retry_dead_jobs(DeadJobFilter(queue="q"), dry_run=True)
    assert by_queue.total == 2
    by_task = store.retry_dead_jobs(DeadJobFilter(task="t.a"), dry_run=True)
    assert by_task.counts == {("q", "t.a"): 1, ("mail", "t.a"): 1}

    done = store.retry_dead_jobs(DeadJobFilter(queue="q", task="t.a"))
    assert not done.dry_run and done.counts == {("q", "t.a"): 1}
    assert states(store, everything) == [S.QUEUED, *before[1:]]
    moved = store.get_job(dead_a)
    # As the single retry: due now, no owner, not finished, its attempt (the fence) kept.
    assert moved.finished_at is None and moved.worker_id is None and moved.attempt == 1
    assert store.hints_for(list(done.touched_ids)) == [moved.hint]
    # Repeating it moves nothing more; the rest still move.
    assert store.retry_dead_jobs(DeadJobFilter(queue="q", task="t.a")).total == 0
    assert store.retry_dead_jobs(DeadJobFilter()).total == 2
    assert (
        states(store, everything) == [S.QUEUED, S.QUEUED, S.SUCCEEDED, S.CANCELLED] + [S.QUEUED] * 2
    )


def test_workflow_steps_are_left_to_their_workflow(store: SqlJobStore) -> None:
    step, plain = finish(store, [("q", "t", S.DEAD), ("q", "t", S.DEAD)])
    with store.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == step).values(workflow_id="wf-1"))
    assert store.retry_dead_jobs(DeadJobFilter(), dry_run=True).total == 1
    assert store.retry_dead_jobs(DeadJobFilter()).total == 1
    assert states(store, [step, plain]) == [S.DEAD, S.QUEUED]


def test_since_keeps_jobs_that_died_after_it(store: SqlJobStore) -> None:
    old, young = finish(store, [("q", "t", S.DEAD), ("q", "t", S.DEAD)])
    with store.engine.begin() as conn:
        long_ago = store.dialect.bind_time(datetime.now(UTC) - timedelta(days=3))
        conn.execute(sa.update(jobs).where(jobs.c.id == old).values(finished_at=long_ago))
    day_ago = datetime.now(UTC) - timedelta(days=1)
    assert store.retry_dead_jobs(DeadJobFilter(died_since=day_ago), dry_run=True).total == 1
    assert store.retry_dead_jobs(DeadJobFilter(died_since=day_ago)).total == 1
    assert states(store, [old, young]) == [S.DEAD, S.QUEUED]


def test_the_move_is_fenced_and_chunked(
    store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_operations, "RETRY_CHUNK", 2)
    ids = finish(store, [("q", "t", S.DEAD)] * 5)
    # Retried one by one meanwhile: the bulk move must neither count nor touch it again.
    store.retry_job(ids[2])
    claimed = store.claim_jobs(queues=["q"], worker_id="w2", limit=1, lease_seconds=60)
    assert [j.id for j in claimed] == [ids[2]]
    report = store.retry_dead_jobs(DeadJobFilter())
    assert report.total == 4 and sorted(report.touched_ids) == sorted(set(ids) - {ids[2]})
    assert store.get_job(ids[2]).state is S.RUNNING  # its new owner keeps it
    assert states(store, [i for i in ids if i != ids[2]]) == [S.QUEUED] * 4
