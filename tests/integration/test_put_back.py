"""A graceful stop puts back the jobs a worker holds, on every backend: the one whose handler
ran spends its attempt, the prefetched ones that never started spend none."""

from __future__ import annotations

import threading

from ledgerq import JobContext, JobState, LedgerQ
from tests.helpers import running_worker, wait_until

S = JobState


def test_a_graceful_stop_charges_no_attempt_to_the_prefetched_jobs(app: LedgerQ) -> None:
    entered, release = threading.Event(), threading.Event()
    runs_seen: dict[int, list[int]] = {}

    @app.task(max_attempts=1)
    def blocks(ctx: JobContext) -> None:
        entered.set()
        release.wait(30)

    @app.task(max_attempts=1)
    def once(ctx: JobContext) -> None:
        runs_seen.setdefault(ctx.job_id, []).append(ctx.attempt)

    @app.task(max_attempts=2, retry_backoff=0.01)
    def fails_first(ctx: JobContext) -> None:
        calls = runs_seen.setdefault(ctx.job_id, [])
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise RuntimeError("first run fails")

    running = blocks.enqueue().job_id  # claimed first (priority 0): it takes the one slot
    waiting = [once.enqueue(priority=5).job_id for _ in range(2)]
    retried = fails_first.enqueue(priority=5).job_id
    held = [running, *waiting, retried]
    worker = app.worker(
        poll_interval_seconds=0.05, concurrency=1, prefetch=3, shutdown_grace_seconds=0.2
    )
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        assert entered.wait(10)
        wait_until(lambda: all(app.jobs.get(i).worker_id == worker.id for i in held))
        worker.request_stop()
        thread.join(20)
    finally:
        release.set()
    assert not thread.is_alive() and worker.stats.requeued == 4
    # Started: today's put-back, its attempt spent. Never started: no attempt spent.
    ran = app.jobs.get(running)
    assert (ran.state, ran.attempt, ran.postponed, ran.runs, ran.max_runs) == (S.QUEUED, 1, 0, 1, 1)
    for job_id in [*waiting, retried]:
        job = app.jobs.get(job_id)
        assert (job.state, job.attempt, job.postponed, job.runs) == (S.QUEUED, 1, 1, 0)
        [row] = app.parts.fleet.list_assignments(job_id=job_id)
        assert (row["attempt"], row["outcome"], row["worker_id"]) == (1, "requeued", worker.id)
    with running_worker(app, poll_interval_seconds=0.05, concurrency=4):
        wait_until(lambda: all(app.jobs.get(i).state is S.SUCCEEDED for i in held))
    for job_id in waiting:  # max_attempts=1: its one run, not an exhausted job
        job = app.jobs.get(job_id)
        assert (job.runs, job.max_runs, runs_seen[job_id]) == (1, 1, [1])
    job = app.jobs.get(retried)  # its retry is left: the put-back spent none of its two runs
    assert (job.runs, job.max_runs, runs_seen[retried]) == (2, 2, [1, 2])
