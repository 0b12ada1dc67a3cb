"""Writers of several running jobs (heartbeats, completions, put-backs) lock rows in ascending
id order, whatever order they are given: a worker's heartbeat and its completer write
overlapping sets at the same moment, and two writers locking in different orders deadlock
(PostgreSQL then fails one of them after a 1 s stall; MariaDB fails one at once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore

SERVER_BACKENDS = ["postgresql", "mysql"]


@pytest.fixture(params=SERVER_BACKENDS)
def ledger(
    request: pytest.FixtureRequest, make_database_url: Callable[[str], str]
) -> Iterator[tuple[SqlJobStore, sa.Engine]]:
    url = make_database_url(request.param)
    store = SqlJobStore(create_engine(url))
    blocker = create_engine(url)
    yield store, blocker
    store.engine.dispose()
    blocker.dispose()


def _running_jobs(store: SqlJobStore, count: int) -> list[Claim]:
    store.insert_jobs([NewJob(task="t", queue="q", args_json="[]") for _ in range(count)])
    found = store.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=60)
    return sorted((Claim(job.id, job.attempt) for job in found), key=lambda c: c.job_id)


def _is_locked(engine: sa.Engine, job_id: int) -> bool:
    with engine.connect() as conn:
        try:
            conn.execute(
                sa.text("SELECT id FROM jobs WHERE id = :id FOR UPDATE NOWAIT"), {"id": job_id}
            ).all()
        except sa.exc.DBAPIError:
            return True
        finally:
            conn.rollback()
        return False


WRITES: dict[str, Callable[[SqlJobStore, list[Claim]], list[bool]]] = {
    "heartbeat": lambda store, claims: store.heartbeat_jobs(claims, lease_seconds=60),
    "complete": lambda store, claims: store.complete_jobs(
        [Completion(c, JobState.SUCCEEDED, result_json="1") for c in claims]
    ),
    "requeue": lambda store, claims: store.requeue_jobs(claims),
    # Started and unstarted put-backs (the latter cost no attempt) in one id-ordered pass.
    "requeue-mixed": lambda store, claims: store.requeue_jobs(claims, unstarted=claims[::2]),
}


def _write_in_thread(
    store: SqlJobStore, write: str, claims: list[Claim]
) -> tuple[threading.Thread, list[list[bool]]]:
    """Start ``write`` of ``claims`` in a thread; its flags land in the returned list."""
    results: list[list[bool]] = []
    writer = threading.Thread(target=lambda: results.append(WRITES[write](store, claims)))
    writer.start()
    return writer, results


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_writer_waiting_on_the_lowest_id_holds_no_higher_one(
    ledger: tuple[SqlJobStore, sa.Engine], write: str
) -> None:
    store, blocker = ledger
    claims = _running_jobs(store, 6)
    lowest, higher = claims[0], claims[1:]
    with blocker.connect() as holder:
        holder.execute(
            sa.text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": lowest.job_id}
        ).all()
        # Given highest first: a writer in input (or plan) order would lock those first.
        writer, results = _write_in_thread(store, write, list(reversed(claims)))
        try:
            time.sleep(0.3)  # give a wrongly ordered writer time to take the higher rows
            assert writer.is_alive(), "the writer must wait for the row the holder locked"
            assert not any(_is_locked(blocker, c.job_id) for c in higher), (
                "while it waits on the lowest id, the writer must hold none of the others"
            )
        finally:
            holder.rollback()
        writer.join(10)
    assert not writer.is_alive()
    assert results == [[True] * len(claims)]  # every write applied, flags in the input order


def test_heartbeats_and_completions_of_the_same_jobs_race_without_deadlock(
    ledger: tuple[SqlJobStore, sa.Engine],
) -> None:
    store, _ = ledger
    errors: list[BaseException] = []

    def run(start: threading.Barrier, write: str, claims: list[Claim]) -> None:
        start.wait()
        try:
            WRITES[write](store, claims)
        except BaseException as exc:  # the failure the test looks for
            errors.append(exc)

    for _ in range(5):
        claims = _running_jobs(store, 32)
        start = threading.Barrier(3)
        writes = [("heartbeat", claims), ("heartbeat", claims[::-1]), ("complete", claims[::-1])]
        threads = [threading.Thread(target=run, args=(start, *w)) for w in writes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert store.count_jobs().get(("q", JobState.RUNNING), 0) == 0
    assert errors == []


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_writer_that_waited_applies_to_rows_another_writer_changed_meanwhile(
    ledger: tuple[SqlJobStore, sa.Engine], write: str
) -> None:
    # The other transaction writes new versions of the rows (as a heartbeat does) and commits
    # while our writer waits for their locks: our writer must still apply to every row.
    store, blocker = ledger
    claims = _running_jobs(store, 8)
    with blocker.connect() as other:
        other.execute(
            sa.text("UPDATE jobs SET heartbeat_at = heartbeat_at WHERE id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": [c.job_id for c in claims]},
        )
        writer, results = _write_in_thread(store, write, claims)
        time.sleep(0.3)  # let the writer start and wait for the locks
        assert writer.is_alive(), "the writer must wait for the rows the other one updated"
        other.commit()
        writer.join(10)
    assert not writer.is_alive()
    assert results == [[True] * len(claims)]
