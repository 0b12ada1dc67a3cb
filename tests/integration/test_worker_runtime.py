"""The worker end to end, in-process, on every backend: retries, timeouts, async tasks,
fencing, graceful stop and transactional enqueue."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.core.job import Claim, as_utc
from ledgerq.core.ports import Completion
from ledgerq.runtime.worker import Worker
from tests.helpers import running_worker, wait_until

S = JobState
FAST = {"poll_interval_seconds": 0.05, "concurrency": 4}


def state_of(app: LedgerQ, job_id: int) -> JobState:
    return app.jobs.get(job_id).state


def test_retries_follow_the_backoff_and_end_dead(app: LedgerQ) -> None:
    starts: list[float] = []

    @app.task(max_attempts=3, retry_backoff=0.3)
    def flaky(ctx: JobContext) -> None:
        starts.append(time.monotonic())
        raise ValueError(f"boom on attempt {ctx.attempt}")

    job_id = flaky.enqueue().job_id
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, job_id) is S.DEAD)
    job = app.jobs.get(job_id)
    error = json.loads(job.error_json or "{}")
    assert job.attempt == 3 and len(starts) == 3
    assert (
        error["kind"] == "exception"
        and error["type"] == "ValueError"
        and "attempt 3" in error["message"]
    )
    # Backoff 0.3 s then 0.6 s, each within ±25 % jitter: the waits are at least that long.
    first_gap, second_gap = starts[1] - starts[0], starts[2] - starts[1]
    assert first_gap >= 0.3 * 0.75 and second_gap >= 0.6 * 0.75


def test_a_failing_job_that_recovers_succeeds_with_its_result(app: LedgerQ) -> None:
    @app.task(max_attempts=5, retry_backoff=0.01)
    def recovers(ctx: JobContext, x: int) -> int:
        if ctx.attempt < 3:
            raise RuntimeError("not yet")
        return x * 2

    job_id = recovers.enqueue(21).job_id
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, job_id) is S.SUCCEEDED)
    job = app.jobs.get(job_id)
    assert job.attempt == 3 and json.loads(job.result_json or "null") == 42


def test_timeout_stops_a_python_loop_and_is_recorded(app: LedgerQ) -> None:
    stopped = threading.Event()

    @app.task(timeout=0.3, max_attempts=1)
    def spins(ctx: JobContext) -> None:
        try:
            while True:
                sum(range(100))
        finally:
            stopped.set()

    job_id = spins.enqueue().job_id
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, job_id) is S.DEAD)
        assert stopped.wait(5), "the timed-out job kept running"
    error = json.loads(app.jobs.get(job_id).error_json or "{}")
    assert error["kind"] == "timeout" and "0.3" in error["message"]


def test_blocked_job_is_abandoned_and_its_slot_replaced(app: LedgerQ) -> None:
    release = threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    def blocks(ctx: JobContext) -> None:
        release.wait(30)  # blocked in C: cannot be interrupted, only abandoned

    @app.task()
    def quick(ctx: JobContext) -> str:
        return "ok"

    blocked = blocks.enqueue().job_id
    with running_worker(app, poll_interval_seconds=0.05, concurrency=1):
        wait_until(lambda: state_of(app, blocked) is S.DEAD)
        after = quick.enqueue().job_id
        wait_until(lambda: state_of(app, after) is S.SUCCEEDED)
        release.set()
    assert json.loads(app.jobs.get(blocked).error_json or "{}")["kind"] == "timeout"


def test_async_tasks_run_and_time_out_by_cancellation(app: LedgerQ) -> None:
    cancelled = threading.Event()

    @app.task()
    async def doubles(ctx: JobContext, x: int) -> int:
        await asyncio.sleep(0.01)
        return 2 * x

    @app.task(timeout=0.2, max_attempts=1)
    async def hangs(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    ok, slow = doubles.enqueue(4).job_id, hangs.enqueue().job_id
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, ok) is S.SUCCEEDED and state_of(app, slow) is S.DEAD)
    assert app.jobs.get(ok).result_json == "8"
    assert cancelled.is_set()
    assert json.loads(app.jobs.get(slow).error_json or "{}")["kind"] == "timeout"


def test_a_stale_attempt_cannot_overwrite_the_new_owner(app: LedgerQ) -> None:
    """Simulate a failover: while the first worker runs the job, it is put back and claimed
    by someone else. The first worker learns it lost the job and its completion is refused."""
    entered, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    @app.task()
    def long_job(ctx: JobContext) -> str:
        entered.set()
        release.wait(30)
        seen.append(ctx.owns_job)
        return "stale"

    job_id = long_job.enqueue().job_id
    store = app.parts.store
    # One slot, held by the long job: the worker itself cannot re-claim the put-back job.
    with running_worker(
        app, poll_interval_seconds=0.05, concurrency=1, prefetch=0, heartbeat_interval_seconds=0.1
    ) as worker:
        assert entered.wait(10)
        first = app.jobs.get(job_id)
        assert store.requeue_jobs([Claim(job_id, first.attempt)]) == [True]
        (taken,) = store.claim_jobs(
            queues=["other", "default"], worker_id="usurper", limit=1, lease_seconds=30
        )
        assert taken.attempt == first.attempt + 1
        wait_until(lambda: worker.running_jobs() and not worker.running_jobs()[0].owns_job)
        release.set()
        wait_until(lambda: worker.stats.refused == 1)
    job = app.jobs.get(job_id)
    assert seen == [False]
    assert (job.state, job.worker_id, job.result_json) == (S.RUNNING, "usurper", None)


def stop_once_entered(worker: Worker, entered: threading.Event) -> threading.Thread:
    """Run ``worker`` on a thread, ask it to stop once a job's handler has ``entered``, and
    return the thread after waiting (up to 20 s) for the worker to end."""
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert entered.wait(10)
    worker.request_stop()
    thread.join(20)
    return thread


def test_graceful_stop_puts_unfinished_jobs_back(app: LedgerQ) -> None:
    entered, release = threading.Event(), threading.Event()

    @app.task()
    def waits(ctx: JobContext) -> None:
        entered.set()
        release.wait(30)

    job_id = waits.enqueue().job_id
    worker = app.worker(poll_interval_seconds=0.05, shutdown_grace_seconds=0.2)
    thread = stop_once_entered(worker, entered)
    release.set()
    job = app.jobs.get(job_id)
    assert not thread.is_alive() and worker.stats.requeued == 1
    assert job.state is S.QUEUED and job.worker_id is None
    # The history records the put-back attempt with its holder and the claim's start.
    [row] = app.parts.fleet.list_assignments(job_id=job_id)
    assert (row["attempt"], row["outcome"], row["worker_id"]) == (1, "requeued", worker.id)
    assert as_utc(row["started_at"]) == job.claimed_at
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, job_id) is S.SUCCEEDED)


def test_a_handler_that_returns_once_put_back_does_not_keep_the_worker_registered(
    app: LedgerQ,
) -> None:
    """A cooperative handler returns as soon as its job was put back at shutdown; its outcome
    (a fenced write that changes nothing) then arrives after the worker flushed its outcomes.
    The worker must still write it and deregister: it once skipped both whenever such an
    outcome was still waiting, as if the ledger took no writes, and stayed "active"."""
    entered = threading.Event()

    @app.task()
    def cooperative(ctx: JobContext) -> None:
        entered.set()
        while not ctx.stop_requested:  # set right after the put-back
            time.sleep(0.0005)

    job_id = cooperative.enqueue().job_id
    worker = app.worker(poll_interval_seconds=0.05, shutdown_grace_seconds=0.1)
    thread = stop_once_entered(worker, entered)
    assert not thread.is_alive() and worker.stats.requeued == 1
    assert app.jobs.get(job_id).state is S.QUEUED
    record = app.parts.fleet.get_worker(worker.id)
    assert record is not None and record.state.value == "stopped", record


def test_a_job_that_ended_after_the_last_flush_is_recorded_not_put_back(app: LedgerQ) -> None:
    """A handler that ends between the shutdown's last flush of outcomes and the put-back of
    unfinished jobs has finished: its outcome is written, and the job is not put back to run
    again (the likely cause of a retry in test_hard_timeout that ran a third time)."""
    entered, release = threading.Event(), threading.Event()

    @app.task()
    def ends_late(ctx: JobContext) -> str:
        entered.set()
        release.wait(30)
        return "done"

    job_id = ends_late.enqueue().job_id
    worker = app.worker(poll_interval_seconds=0.05, shutdown_grace_seconds=0.1)
    completer = worker._completer
    flush, write, written = completer.flush, completer._write, threading.Event()

    def write_once_put_back(group: list[Completion]) -> None:
        written.wait(10)  # the late outcome stays unwritten while the put-back runs
        write(group)

    def flush_then_let_the_job_end(timeout: float) -> bool:
        flushed = flush(timeout)
        release.set()  # the handler ends now, after the flush, before the put-back
        wait_until(lambda: completer.backlog().pending == 1)
        threading.Timer(0.5, written.set).start()
        return flushed

    completer._write = write_once_put_back  # type: ignore[method-assign]
    completer.flush = flush_then_let_the_job_end  # type: ignore[method-assign]
    thread = stop_once_entered(worker, entered)
    job = app.jobs.get(job_id)
    assert not thread.is_alive() and worker.stats.requeued == 0
    assert (job.state, job.attempt, job.result_json) == (S.SUCCEEDED, 1, '"done"')


def test_delayed_job_waits_for_its_time(app: LedgerQ) -> None:
    ran_at: list[float] = []

    @app.task()
    def later(ctx: JobContext) -> None:
        ran_at.append(time.monotonic())

    enqueued = time.monotonic()
    job_id = later.enqueue(delay=0.5).job_id
    assert state_of(app, job_id) is S.SCHEDULED
    with running_worker(app, **FAST):
        wait_until(lambda: state_of(app, job_id) is S.SUCCEEDED)
    assert ran_at[0] - enqueued >= 0.45


def test_burst_worker_drains_and_exits(app: LedgerQ) -> None:
    @app.task()
    def noop(ctx: JobContext, i: int) -> int:
        return i

    noop.enqueue_many([(i,) for i in range(300)])
    stats = app.worker(burst=True, concurrency=4, poll_interval_seconds=0.05).run()
    assert stats.outcomes == {"succeeded": 300}
    assert app.client.store.count_jobs() == {("default", S.SUCCEEDED): 300}


def test_burst_worker_runs_jobs_delayed_within_its_horizon_and_leaves_later_ones(
    app: LedgerQ,
) -> None:
    @app.task()
    def later(ctx: JobContext, i: int) -> int:
        return i

    soon = later.enqueue(1, delay=0.5).job_id
    far = later.enqueue(2, delay=3600).job_id
    stats = app.worker(burst=True, concurrency=2, poll_interval_seconds=0.05).run()
    assert stats.outcomes == {"succeeded": 1}
    assert state_of(app, soon) is S.SUCCEEDED
    assert state_of(app, far) is S.SCHEDULED


def test_burst_worker_waits_for_jobs_a_rate_limit_postponed(app: LedgerQ) -> None:
    @app.task(rate_limit="5/s")
    def limited(ctx: JobContext, i: int) -> int:
        return i

    limited.enqueue_many([(i,) for i in range(8)])
    # Eight jobs at 5/s: some are postponed (scheduled again, attempt kept) while others run;
    # the burst worker must not call the queue empty before they ran.
    stats = app.worker(burst=True, concurrency=4, poll_interval_seconds=0.05).run()
    assert app.client.store.count_jobs() == {("default", S.SUCCEEDED): 8}
    assert stats.outcomes == {"succeeded": 8}


def test_priority_runs_first_on_a_single_slot(app: LedgerQ) -> None:
    order: list[str] = []

    @app.task()
    def mark(ctx: JobContext, name: str) -> None:
        order.append(name)

    mark.enqueue("low", priority=9)
    mark.enqueue("high", priority=0)
    mark.enqueue("mid", priority=5)
    app.worker(burst=True, concurrency=1, batch_size=1).run()
    assert order == ["high", "mid", "low"]


def test_every_attempt_is_in_the_history_with_its_outcome(app: LedgerQ) -> None:
    """``job_assignments`` holds one closed row per attempt, whether the outcome was written
    by a group completion or, for batch members, row by row with the batch's bookkeeping."""

    @app.task(max_attempts=2, retry_backoff=0.01)
    def maybe(ctx: JobContext, fail: bool) -> None:
        if fail:
            raise ValueError("boom")

    ok = maybe.enqueue(False).job_id
    bad = maybe.enqueue(True).job_id
    member = app.batch([(maybe, (False,))]).job_ids[0]
    finished = (S.SUCCEEDED, S.DEAD)
    with running_worker(app, **FAST) as worker:
        wait_until(lambda: all(state_of(app, j) in finished for j in (ok, bad, member)))
    history = {(r["job_id"], r["attempt"]): r for r in app.parts.fleet.list_assignments()}
    assert {key: row["outcome"] for key, row in history.items()} == {
        (ok, 1): "succeeded",
        (bad, 1): "failed",
        (bad, 2): "dead",
        (member, 1): "succeeded",
    }
    for row in history.values():
        assert row["worker_id"] == worker.id
        assert row["started_at"] is not None and row["ended_at"] >= row["started_at"]
    # A one-attempt job's row began when its claim did (the job keeps its last claim); its
    # body started after that.
    for job_id in (ok, member):
        job = app.jobs.get(job_id)
        assert as_utc(history[(job_id, 1)]["started_at"]) == job.claimed_at
        assert job.claimed_at is not None and job.started_at is not None
        assert job.claimed_at <= job.started_at <= job.finished_at


def test_a_handlers_log_lines_carry_its_job(app: LedgerQ) -> None:
    import structlog
    from structlog.testing import LogCapture

    from ledgerq.runtime.log_context import merge_job_context

    captured = LogCapture()
    structlog.configure(processors=[merge_job_context, captured])
    try:

        @app.task(queue="logs")
        def talks(ctx: JobContext, n: int) -> None:
            structlog.get_logger("handler").info("working", n=n)

        ids = [talks.enqueue(n).job_id for n in range(3)]
        app.worker(queues=("logs",), burst=True, concurrency=2).run()
    finally:
        structlog.reset_defaults()
    lines = [entry for entry in captured.entries if entry["event"] == "working"]
    seen = {(e["job_id"], e["n"], e["queue"], e["task"], e["attempt"]) for e in lines}
    assert seen == {(job_id, n, "logs", talks.name, 1) for n, job_id in enumerate(ids)}


def test_claimed_jobs_waiting_in_a_prefetch_are_not_shown_as_started(app: LedgerQ) -> None:
    """One slot and three prefetched jobs: the ledger shows one started body and three jobs
    waiting to start (``started_at`` NULL); each body's real start is written while it runs
    or with its outcome, never before it began."""
    release = threading.Event()
    began: dict[int, float] = {}

    @app.task()
    def waits(ctx: JobContext) -> None:
        began[ctx.job_id] = time.monotonic()
        release.wait(30)

    ids = [r.job_id for r in waits.enqueue_many([() for _ in range(4)])]
    with running_worker(app, poll_interval_seconds=0.05, concurrency=1, prefetch=3):
        wait_until(lambda: len(began) == 1, what="the first body started")
        wait_until(
            lambda: app.client.store.count_waiting_to_start() == {"default": 3},
            what="three jobs claimed but waiting to start",
        )
        [running] = began
        # The running body's start is written within a fraction of a second.
        job = wait_until(
            lambda: (j := app.jobs.get(running)).started_at is not None and j,
            timeout=5,
            what="the running job's start written",
        )
        assert job.claimed_at is not None and job.claimed_at <= job.started_at
        waiting = [app.jobs.get(i) for i in ids if i != running]
        assert all(j.state is S.RUNNING and j.waiting_to_start for j in waiting)
        assert all(j.started_at is None and j.claimed_at is not None for j in waiting)
        time.sleep(0.3)  # the prefetched ones wait measurably before their slot frees
        release.set()
        wait_until(lambda: all(state_of(app, i) is S.SUCCEEDED for i in ids))
    done = sorted((app.jobs.get(i) for i in ids), key=lambda j: j.started_at or j.created_at)
    for job in done:
        assert job.claimed_at is not None and job.started_at is not None
        assert job.claimed_at <= job.started_at <= (job.finished_at or job.started_at)
    # A prefetched job started only after the running one's release: after it was claimed.
    assert max(j.started_at - j.claimed_at for j in done).total_seconds() >= 0.25


def test_no_job_starts_once_a_hung_job_makes_the_worker_recycle(app: LedgerQ) -> None:
    """A timed-out job blocked in C makes the worker stop at once to be recycled. A job
    claimed after that decision, before the stop is under way, must not start only to be
    abandoned by the recycle (seen in CI: such a job ran, was put back while running and ran
    again, attempt 3 for a job that fails once): it goes back unstarted."""
    release, quick_started = threading.Event(), threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    def blocks(ctx: JobContext) -> None:
        release.wait(30)  # blocked in C: only ending the process stops it

    @app.task()
    def quick(ctx: JobContext) -> None:
        quick_started.set()

    blocks.enqueue()
    worker = app.worker(poll_interval_seconds=0.05, concurrency=2, recycle_when_hung=True)
    decided, carry_on = threading.Event(), threading.Event()
    request_stop = worker.request_stop

    def stop_later(*, immediate: bool = False) -> None:
        # Hold the stop back: the worker goes on fetching as if its main loop had not
        # noticed yet, which is the window the job slipped through.
        decided.set()
        carry_on.wait(20)
        request_stop(immediate=immediate)

    worker.request_stop = stop_later  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert decided.wait(20), "the hung job never made the worker recycle"
        job_id = quick.enqueue().job_id
        wait_until(lambda: app.jobs.get(job_id).claimed_at is not None, what="quick claimed")
        # Proving a negative: a slot is free, and would start it within milliseconds.
        assert not quick_started.wait(0.5), "a job started after the worker decided to recycle"
    finally:
        carry_on.set()
        thread.join(20)
        release.set()
    assert not thread.is_alive() and worker.recycle_requested
    job = app.jobs.get(job_id)
    # Put back unstarted: a postponement, which costs no attempt.
    assert job.state is S.QUEUED and job.postponed == 1 and job.attempt - job.postponed == 0, job
