"""Unique jobs for a time window (``dedupe_for``) on SQLite, PostgreSQL and MariaDB: duplicates,
also concurrent ones, yield exactly one job; the key stays taken after the job finished and is
free again once the window expired."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from ledgerq import EnqueueResult, JobContext, JobState, LedgerQ, Task
from ledgerq.core import errors
from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from tests.helpers import wait_until


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, db_pool_size=8)
    # Connect once before threads race: concurrent first connects of a fresh PostgreSQL
    # engine leave unclosed psycopg connections behind (a driver/pool quirk, not ledgerq's).
    application.jobs.list(limit=1)
    yield application
    application.close()


def report_task(app: LedgerQ) -> Task[..., None]:
    @app.task(name="report")
    def report(ctx: JobContext, customer: int) -> None: ...

    return report


def finish(app: LedgerQ, job_id: int) -> None:
    """Run the job to success, as a worker would."""
    store = app.client.store
    claimed = store.claim_jobs(queues=["default"], worker_id="w", limit=10, lease_seconds=30)
    job = next(j for j in claimed if j.id == job_id)
    done = store.complete_jobs([Completion(Claim(job.id, job.attempt), JobState.SUCCEEDED)])
    assert done == [True]


def race(count: int, enqueue: Callable[[], EnqueueResult]) -> list[EnqueueResult]:
    """Run ``enqueue`` from ``count`` threads released at the same moment."""
    barrier = threading.Barrier(count)
    results: list[EnqueueResult] = []
    failures: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(enqueue())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    return results


def test_the_key_holds_after_the_job_finished_until_the_window_expires(app: LedgerQ) -> None:
    report = report_task(app)
    first = report.enqueue(1, dedupe_key="daily-1", dedupe_for=1.5)
    assert not first.duplicate
    finish(app, first.job_id)
    assert app.jobs.get(first.job_id).state is JobState.SUCCEEDED
    again = report.enqueue(1, dedupe_key="daily-1", dedupe_for=1.5)
    assert again == EnqueueResult(first.job_id, duplicate=True)
    # An enqueue without a window respects a live window too.
    plain = report.enqueue(1, dedupe_key="daily-1")
    assert plain == EnqueueResult(first.job_id, duplicate=True)
    assert len(app.jobs.list()) == 1

    def fresh() -> EnqueueResult | None:
        result = report.enqueue(1, dedupe_key="daily-1", dedupe_for=timedelta(seconds=60))
        return None if result.duplicate else result

    second = wait_until(fresh, timeout=15, what="the window expires", interval=0.1)
    assert second is not None and second.job_id != first.job_id
    assert report.enqueue(1, dedupe_key="daily-1").job_id == second.job_id
    assert len(app.jobs.list()) == 2


def test_concurrent_duplicates_yield_one_job_also_when_a_window_reopens(app: LedgerQ) -> None:
    report = report_task(app)
    results = race(8, lambda: report.enqueue(1, dedupe_key="burst", dedupe_for=60))
    assert len({r.job_id for r in results}) == 1
    assert sorted(r.duplicate for r in results) == [False] + [True] * 7

    # A finished job whose window expired: eight enqueues race to reopen the key.
    short = report.enqueue(2, dedupe_key="reopen", dedupe_for=0.5)
    finish(app, short.job_id)
    wait_until(lambda: not _window_live(app, "reopen"), what="the window expires")
    reopened = race(8, lambda: report.enqueue(2, dedupe_key="reopen", dedupe_for=60))
    winners = [r for r in reopened if not r.duplicate]
    assert len(winners) == 1 and winners[0].job_id != short.job_id
    assert {r.job_id for r in reopened} == {winners[0].job_id}
    assert [j.dedupe_key for j in app.jobs.list()].count("reopen") == 2


def _window_live(app: LedgerQ, key: str) -> bool:
    from ledgerq.store.dedupe import DedupeWindows

    store = app.client.store
    with store.engine.connect() as conn:
        return DedupeWindows(store.dialect).holder(conn, key) is not None


def test_enqueue_many_dedupes_within_the_batch_and_against_windows(app: LedgerQ) -> None:
    report = report_task(app)
    held = report.enqueue(0, dedupe_key="k0", dedupe_for=60)
    finish(app, held.job_id)
    results = report.enqueue_many(
        [(0,), (1,), (2,), (3,)], dedupe_keys=["k0", "k1", "k1", None], dedupe_for=60
    )
    assert results[0] == EnqueueResult(held.job_id, duplicate=True)
    assert not results[1].duplicate
    assert results[2] == EnqueueResult(results[1].job_id, duplicate=True)
    assert not results[3].duplicate
    assert len(app.jobs.list()) == 3
    with pytest.raises(errors.InvalidJob, match="dedupe_keys"):
        report.enqueue_many([(1,)], dedupe_keys=["a", "b"])


def test_bad_windows_are_refused(app: LedgerQ) -> None:
    report = report_task(app)
    for bad in (
        {"dedupe_for": 10},  # no key
        {"dedupe_key": "k", "dedupe_for": 0},
        {"dedupe_key": "k", "dedupe_for": -1},
        {"dedupe_key": "k", "dedupe_for": 10**9},
        {"dedupe_key": "k", "dedupe_for": "soon"},
    ):
        with pytest.raises(errors.InvalidJob):
            report.enqueue(1, **bad)
    assert app.jobs.list() == []
