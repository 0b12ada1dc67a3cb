"""The executor's automatic prefetch: short jobs raise it; a job of a limited task (whose
handler may be just as short) drops it to the floor, so a worker does not claim limited jobs
far ahead of their admission."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import Job
from ledgerq.core.limits import TaskLimits
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.executor import Executor
from ledgerq.runtime.prefetch import AUTO_MAX_FACTOR
from tests.helpers import wait_until

CONCURRENCY = 2


def noop(ctx: JobContext) -> None:
    return None


def job(job_id: int, task: str) -> Job:
    now = datetime.now(UTC)
    return Job(job_id, "default", task, "[]", 0, JobState.RUNNING, 1, 3, now, now)


class Runner:
    """An executor with an unlimited and a rate-limited no-op task."""

    def __init__(self) -> None:
        registry = TaskRegistry()
        registry.add(TaskSpec("fast", noop))
        limits = TaskLimits.build(
            rate_limit="1000/s",
            rate_key=None,
            concurrency_limit=None,
            concurrency_key=None,
            breaker=None,
        )
        registry.add(TaskSpec("limited", noop, limits=limits))
        self.done: list[Completion] = []
        self._lock = threading.Lock()
        self.executor = Executor(
            registry=registry,
            codec=PayloadCodec(),
            concurrency=CONCURRENCY,
            on_complete=self._record,
            prefetch=None,
            admit=lambda ctx, spec: True,
        )
        self.executor.start()
        self._next_id = 0

    def _record(self, completion: Completion) -> None:
        with self._lock:
            self.done.append(completion)

    def run(self, task: str, count: int) -> None:
        """Run ``count`` jobs of ``task``, one at a time, and wait for the last."""
        for _ in range(count):
            self._next_id += 1
            self.executor.submit(JobContext(job(self._next_id, task)))
            assert self.executor.wait_idle(10)
        wait_until(lambda: len(self.done) == self._next_id, timeout=10, what="jobs done")

    def close(self) -> None:
        self.executor.stop()


def test_a_limited_task_drops_the_prefetch_that_short_jobs_raised() -> None:
    runner = Runner()
    try:
        assert runner.executor.capacity == CONCURRENCY  # no duration seen yet: no prefetch
        runner.run("fast", 200)
        assert runner.executor.capacity == CONCURRENCY + AUTO_MAX_FACTOR * CONCURRENCY
        runner.run("limited", 1)
        assert runner.executor.capacity == CONCURRENCY
        runner.run("fast", 200)  # within the hold, short unlimited jobs do not raise it again
        assert runner.executor.capacity == CONCURRENCY
    finally:
        runner.close()
