"""Waiting for a result, on every backend: ``handle.wait`` / ``app.jobs.wait`` return the
decoded value, raise ``JobFailed`` for a dead or cancelled job and ``WaitTimeout`` for a job no
worker runs; a duplicate's handle waits on the first job; ``app.workflows.wait`` returns the
final workflow, and a workflow's event feed ends at its final event. Deadlines only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from ledgerq import EnqueueResult, JobContext, JobFailed, JobState, LedgerQ, WaitTimeout
from ledgerq.core import workflow as wf
from ledgerq.store.postgres.statements import FINISHED_CHANNEL
from ledgerq.store.tables import job_waiters
from tests.helpers import running_worker, wait_until

FAST = {"poll_interval_seconds": 0.05, "concurrency": 2, "reconcile": False}


def test_wait_returns_the_decoded_value_of_a_succeeded_job(app: LedgerQ) -> None:
    @app.task
    def add(ctx: JobContext, x: int, y: int) -> dict[str, Any]:
        return {"sum": x + y, "parts": [x, y]}

    @app.task
    def nothing(ctx: JobContext) -> None:
        return None

    handle = add.enqueue(2, 3)
    other = add.options(priority=1).enqueue(4, 5)
    empty = nothing.enqueue()
    assert handle == EnqueueResult(handle.job_id) and not handle.duplicate
    with running_worker(app, **FAST):
        assert handle.wait(timeout=20) == {"sum": 5, "parts": [2, 3]}
        assert app.jobs.wait(other.job_id, timeout=20) == {"sum": 9, "parts": [4, 5]}
        assert empty.wait(20) is None
    # A finished job answers at once, worker or not.
    assert handle.wait(timeout=0) == {"sum": 5, "parts": [2, 3]}


def test_wait_raises_the_error_of_a_dead_or_cancelled_job(app: LedgerQ) -> None:
    @app.task(max_attempts=1)
    def boom(ctx: JobContext, n: int) -> int:
        raise ValueError(f"bad n {n}")

    handle = boom.enqueue(7)
    with running_worker(app, **FAST), pytest.raises(JobFailed) as failed:
        handle.wait(timeout=20)
    assert failed.value.job_id == handle.job_id
    assert failed.value.state == JobState.DEAD
    assert failed.value.error_type == "ValueError"
    assert failed.value.error_message is not None and "bad n 7" in failed.value.error_message

    parked = boom.options(queue="nobody").enqueue(1)
    app.jobs.cancel(parked.job_id)
    with pytest.raises(JobFailed, match="cancelled") as cancelled:
        app.jobs.wait(parked.job_id, timeout=5)
    assert cancelled.value.state == JobState.CANCELLED


def test_wait_times_out_on_a_job_no_worker_runs(app: LedgerQ) -> None:
    @app.task
    def slow(ctx: JobContext) -> int:
        return 1

    handle = slow.enqueue()
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match="still queued") as timed_out:
        handle.wait(timeout=0.3)
    waited = time.monotonic() - started
    assert 0.3 <= waited < 5
    assert isinstance(timed_out.value, TimeoutError) and timed_out.value.state == "queued"
    assert app.jobs.get(handle.job_id).state is JobState.QUEUED  # the wait changes nothing
    with pytest.raises(TimeoutError):
        app.jobs.wait(handle.job_id, timeout=0)


def test_a_duplicate_handle_waits_on_the_first_job(app: LedgerQ) -> None:
    @app.task
    def once(ctx: JobContext, n: int) -> int:
        return n * 2

    first = once.options(dedupe_key="k").enqueue(21)
    again = once.options(dedupe_key="k").enqueue(99)
    assert again.duplicate and again.job_id == first.job_id
    with running_worker(app, **FAST):
        assert again.wait(timeout=20) == 42
    assert first.wait(timeout=0) == 42


def test_a_workflow_is_waited_on_and_its_feed_ends_at_its_final_event(app: LedgerQ) -> None:
    @app.task
    def fetch(ctx: JobContext, n: int) -> int:
        return n * 10

    @app.task
    def double(ctx: JobContext, upstream: dict[str, Any]) -> int:
        return int(upstream["fetch"]) * 2

    flow = app.workflow("pair")
    double_step = flow.step(double.s(), after=[flow.step(fetch.s(4))])
    workflow_id = flow.enqueue()
    with pytest.raises(WaitTimeout, match="still running"):
        app.workflows.wait(workflow_id, timeout=0.1)

    feed_timeout = 60.0
    with running_worker(app, **FAST), app.workflow_events(workflow_id, poll_interval=0.05) as feed:
        started = time.monotonic()
        events = list(feed.events(timeout=feed_timeout))
        ended_after = time.monotonic() - started
        view = app.workflows.wait(workflow_id, timeout=20)
    assert ended_after < feed_timeout / 3, "the feed waited out its timeout"
    assert events[-1].type == wf.WORKFLOW_FINISHED
    assert view.state is wf.WorkflowState.SUCCEEDED
    step_job = {s.name: s.job_id for s in view.steps}[double_step.name]
    assert step_job is not None and app.jobs.wait(step_job, timeout=0) == 80


def test_on_postgresql_a_group_completion_notifies_the_jobs_it_finished(
    make_database_url: Callable[[str], str],
) -> None:
    """The signal, not a re-read, wakes the wait: the watch's event is set by the completion's
    NOTIFY (cleared after the watch began, before any job ran), and a retry sends none."""
    app = LedgerQ(database_url=make_database_url("postgresql"))
    try:

        @app.task
        def echo(ctx: JobContext, n: int) -> int:
            return n

        @app.task(max_attempts=2, retry_backoff=60.0)
        def flaky(ctx: JobContext) -> int:
            raise RuntimeError("again later")

        signal = app.parts.finished
        assert signal is not None
        handle, retried = echo.enqueue(5), flaky.enqueue()
        woken, not_woken = signal.watch(handle.job_id), signal.watch(retried.job_id)
        woken.clear()  # a (re)connect wakes every watch once
        not_woken.clear()
        with running_worker(app, **FAST):
            assert woken.wait(20), "no NOTIFY named the finished job"
            wait_until(lambda: app.jobs.get(retried.job_id).state is JobState.FAILED)
            assert handle.wait(timeout=5) == 5
        assert not not_woken.is_set(), "a retry is not a finish"
        signal.unwatch(handle.job_id, woken)
        signal.unwatch(retried.job_id, not_woken)
        with app.parts.store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(job_waiters)).scalar() == 0
    finally:
        app.close()


def test_on_postgresql_a_job_nobody_waits_on_sends_no_notify(
    make_database_url: Callable[[str], str],
) -> None:
    """A NOTIFY serializes commits: completions send one only for the jobs waited on."""
    url = make_database_url("postgresql")
    app = LedgerQ(database_url=url)
    try:

        @app.task
        def echo(ctx: JobContext, n: int) -> int:
            return n

        @app.task
        def slow_echo(ctx: JobContext, n: int) -> int:
            time.sleep(0.5)  # still running when the wait below registers
            return n

        conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(conninfo, autocommit=True) as listener:
            listener.execute(f"LISTEN {FINISHED_CHANNEL}")
            quiet = [echo.enqueue(n).job_id for n in range(20)]
            with running_worker(app, **FAST):
                wait_until(lambda: all(app.jobs.get(i).state is JobState.SUCCEEDED for i in quiet))
                waited = slow_echo.enqueue(7)
                assert waited.wait(timeout=20) == 7
            schema = str(listener.execute("SELECT current_schema()").fetchone()[0])  # type: ignore[index]
            payloads = [note.payload for note in listener.notifies(timeout=0.5)]
        # Tests in other schemas of the database notify the same channel.
        ours = [p for p in payloads if p.rpartition(":")[0] == schema]
        assert ours == [f"{schema}:{waited.job_id}"]
    finally:
        app.close()


def test_a_batch_is_waited_on_until_every_member_finished(app: LedgerQ) -> None:
    @app.task
    def square(ctx: JobContext, n: int) -> int:
        return n * n

    @app.task(max_attempts=1)
    def broken(ctx: JobContext, n: int) -> int:
        raise RuntimeError("no")

    batch = app.batch([(square, (2,)), (square, (3,)), (broken, (4,))])
    assert batch.id is not None
    with pytest.raises(WaitTimeout, match="0 of 3 members finished"):
        batch.wait(timeout=0.05)
    with running_worker(app, **FAST):
        status = batch.wait(timeout=20)
    assert status.finished == 3
    assert status.counts.get(JobState.SUCCEEDED) == 2 and status.counts.get(JobState.DEAD) == 1
    assert app.batches.wait(batch.id, timeout=0) == status
