"""Worker processes against real databases: many workers drain a queue exactly once, a
SIGTERM (or two SIGINTs) loses nothing, a SIGKILL leaves the ledger honest, ``--once`` runs one.

Every worker is a ``ledgerq --app tests.acceptance.effects_app:app worker start`` subprocess;
the tasks record their effects in the same database (see ``effects_app``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]


def assert_all_succeeded_once(db: Ledger, keys: set[str]) -> None:
    """Every job succeeded, each key's effect exists exactly once, nothing ran twice."""
    assert db.failures() == {}
    assert set(db.effect_rows()) == keys
    assert db.duplicate_rows() == []


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_four_workers_drain_5000_jobs_exactly_once(
    backend: str, ledger: Make, procs: Procs
) -> None:
    db = ledger(backend)
    keys = [f"k{i:05d}" for i in range(5000)]
    db.effects.record_effect.enqueue_many([(key,) for key in keys])
    assert db.states() == {"queued": 5000}

    workers = [procs.worker(db.url, "--concurrency", "4", "--burst") for _ in range(4)]
    deadline = time.monotonic() + 120
    for worker in workers:
        assert worker.wait(max(deadline - time.monotonic(), 0.1)) == 0, worker.log()

    jobs = db.jobs()
    assert db.states() == {"succeeded": 5000}, db.failures()
    # Each job was claimed exactly once (the attempt is the claim counter) ...
    assert {row.attempt for row in jobs.values()} == {1}
    assert all(row.finished_at is not None for row in jobs.values())
    # ... and its effect ran exactly once, under that job.
    effects = db.effect_rows()
    assert db.effect_count() == 5000
    assert set(effects) == set(keys)
    assert db.duplicate_rows() == []
    assert {row.job_id for row in effects.values()} == set(jobs)
    # The work really was shared: these were competing processes, not one.
    assert len({row.worker_id for row in jobs.values()}) >= 2
    # Nobody lost a job (every attempt is 1), so no worker may have said it did: a false
    # "lost" marks the job context as no longer owning a job it still owns.
    lost = [line for w in workers for line in w.log().splitlines() if "no longer owned" in line]
    assert lost == [], "workers reported losing jobs they went on to complete"


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_sigterm_loses_nothing(backend: str, ledger: Make, procs: Procs) -> None:
    db = ledger(backend)
    # The first four jobs claimed (lowest ids): one that ends inside the grace period and
    # three whose first run outlives it by far (their rerun is short); then short jobs.
    calls: list[tuple[object, ...]] = [("short-0", 0.6)]
    calls += [(f"long-{i}", 60.0, 0.2) for i in range(1, 4)]
    calls += [(f"tail-{i}", 0.2) for i in range(4, 20)]
    ids = [r.job_id for r in db.effects.slow.enqueue_many(calls)]
    short, longs = ids[0], set(ids[1:4])

    worker = procs.worker(db.url, "--concurrency", "4", "--grace", "1.0", "--poll-interval", "0.1")
    wait_until(lambda: len(db.start_rows()) >= 4, timeout=30, what="four jobs started")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()

    after_stop = db.jobs()
    assert db.ids_in("running") == set(), after_stop
    # The job that could finish inside the grace period did; the long ones were put back
    # (still attempt 1, the put-back is not a new claim) without an effect.
    assert after_stop[short].state == "succeeded", after_stop[short]
    assert {after_stop[i].state for i in longs} == {"queued"}
    assert {after_stop[i].attempt for i in longs} == {1}
    assert all(after_stop[i].finished_at is None for i in longs)
    assert set(db.states()) <= {"succeeded", "queued"}
    succeeded = db.ids_in("succeeded")
    effects = db.effect_rows()
    assert {row.job_id for row in effects.values()} == succeeded
    assert db.duplicate_rows() == []

    finisher = procs.worker(db.url, "--concurrency", "8", "--burst")
    assert finisher.wait(60) == 0, finisher.log()
    assert_all_succeeded_once(db, {str(call[0]) for call in calls})
    final = db.jobs()
    # The interrupted jobs ran again, as their second attempt.
    assert {final[i].attempt for i in longs} == {2}
    assert {(key, attempt) for key, job_id, attempt in db.start_rows() if job_id in longs} == {
        (call[0], attempt) for call in calls[1:4] for attempt in (1, 2)
    }


def test_sigterm_with_prefetch_starts_no_job_it_put_back(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    # One slot, three prefetched jobs waiting behind a long one that stops cooperatively.
    first = db.effects.yielding.enqueue("first", 60.0, 0.1).job_id
    waiting = {r.job_id for r in db.effects.record_effect.enqueue_many([("b",), ("c",), ("d",)])}

    worker = procs.worker(db.url, "--concurrency", "1", "--prefetch", "3", "--grace", "0.3")
    wait_until(db.start_rows, timeout=30, what="the first job started")
    wait_until(
        lambda: db.ids_in("running") == {first} | waiting,
        timeout=10,
        what="three jobs prefetched behind the running one (--prefetch 3)",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()

    # Every job was put back; none of the prefetched ones may have run after that.
    assert db.states() == {"queued": 4}, db.jobs()
    assert db.effect_rows() == {}, "a job ran after the worker had put it back"

    finisher = procs.worker(db.url, "--burst")
    assert finisher.wait(60) == 0, finisher.log()
    assert_all_succeeded_once(db, {"first", "b", "c", "d"})
    assert {row.job_id for row in db.effect_rows().values()} == waiting | {first}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_leaves_running_jobs_running_and_never_done(
    backend: str, ledger: Make, procs: Procs
) -> None:
    db = ledger(backend)
    ids = [r.job_id for r in db.effects.slow.enqueue_many([(f"k{i}", 30.0) for i in range(6)])]

    # No prefetch: then exactly the four started jobs are claimed and the rest stay queued.
    worker = procs.worker(db.url, "--concurrency", "4", "--prefetch", "0")
    started = wait_until(
        lambda: db.start_rows() if len(db.start_rows()) >= 4 else None,
        timeout=30,
        what="four jobs started",
    )
    worker.signal(signal.SIGKILL)
    assert worker.wait(10) == -signal.SIGKILL

    running = {job_id for _, job_id, _ in started}
    assert len(running) == 4
    jobs = db.jobs()
    for job_id in running:
        row = jobs[job_id]
        assert (row.state, row.attempt, row.finished_at) == ("running", 1, None), row
        assert row.worker_id
    for job_id in set(ids) - running:
        assert (jobs[job_id].state, jobs[job_id].attempt) == ("queued", 0), jobs[job_id]
    assert db.ids_in("succeeded") == set()
    assert db.effect_count() == 0
    assert db.duplicate_rows() == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_once_runs_exactly_one_job(backend: str, ledger: Make, procs: Procs) -> None:
    db = ledger(backend)
    ids = [r.job_id for r in db.effects.record_effect.enqueue_many([("a",), ("b",), ("c",)])]

    worker = procs.worker(db.url, "--once")
    assert worker.wait(30) == 0, worker.log()

    assert db.states() == {"succeeded": 1, "queued": 2}, db.failures()
    (done,) = db.ids_in("succeeded")
    assert done == ids[0]  # the oldest job of equal priority runs first
    assert {row.job_id for row in db.effect_rows().values()} == {done}
    assert all(db.jobs()[i].attempt == 0 for i in ids if i != done)


def test_graceful_stop_with_sigint_twice(ledger: Make, procs: Procs) -> None:
    db = ledger("sqlite")
    ids = [r.job_id for r in db.effects.slow.enqueue_many([(f"k{i}", 30.0) for i in range(3)])]

    worker = procs.worker(db.url, "--concurrency", "4", "--grace", "60")
    wait_until(lambda: len(db.start_rows()) == 3, timeout=30, what="three jobs started")
    worker.signal(signal.SIGINT)
    # One SIGINT is a graceful stop: with 60 s of grace, the busy worker keeps running.
    with pytest.raises(AssertionError, match="still running"):
        worker.wait(0.5)
    assert db.ids_in("running") == set(ids)

    began = time.monotonic()
    worker.signal(signal.SIGINT)
    assert worker.wait(10) == 0, worker.log()
    assert time.monotonic() - began < 5, "the second SIGINT did not skip the grace period"
    jobs = db.jobs()
    assert {jobs[i].state for i in ids} == {"queued"}, jobs
    assert db.effect_count() == 0
    assert db.duplicate_rows() == []
