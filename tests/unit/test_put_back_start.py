"""The handshake between a slot starting a held job and the worker putting it back at a stop
(``JobContext.begin`` / ``take_back``): a job put back as never started never runs, so the
put-back that spends no attempt cannot hide a run."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import Job
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.executor import Executor


def held(job_id: int = 1) -> JobContext:
    now = datetime.now(UTC)
    return JobContext(Job(job_id, "default", "t", "[]", 0, JobState.RUNNING, 1, 3, now, now))


def test_take_back_reports_whether_the_body_started_and_stops_a_later_start() -> None:
    started = held()
    assert started.begin(1.0) and started.take_back()
    waiting = held()
    assert not waiting.take_back()
    assert not waiting.begin(2.0), "a job taken back must not start"


def test_a_job_taken_back_while_its_admission_is_checked_never_runs() -> None:
    ran: list[int] = []
    skipped: list[JobContext] = []
    done: list[Completion] = []
    admitting, admitted = threading.Event(), threading.Event()

    def admit(ctx: JobContext, spec: TaskSpec | None) -> bool:
        admitting.set()
        return admitted.wait(10)  # a limit's admission, a round trip to the ledger

    registry = TaskRegistry()
    registry.add(TaskSpec("t", lambda ctx: ran.append(ctx.job_id)))
    executor = Executor(
        registry=registry,
        codec=PayloadCodec(),
        concurrency=1,
        on_complete=done.append,
        on_skipped=skipped.append,
        admit=admit,
    )
    executor.start()
    try:
        ctx = held()
        executor.submit(ctx)
        assert admitting.wait(10)
        assert not ctx.take_back(), "its body has not started"
        admitted.set()
        assert executor.wait_idle(10)
    finally:
        executor.stop()
    assert (ran, done, skipped) == ([], [], [ctx])
