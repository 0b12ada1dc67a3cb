"""Deferrer: what a worker does with a claimed job of a task its application does not register,
as old workers meet new tasks during a rolling deploy. The job goes back to the queue without
spending an attempt (the store's fenced ``defer_unknown_task``), with a WARNING and a
``UnknownTaskSeen`` event, while a live worker of its queue declares the task or the grace
period since its first put-back lasts; after that it is buried (``dead``, ``unknown_task``)."""

from __future__ import annotations

import structlog

from ledgerq.core import errors
from ledgerq.core import unknown_tasks as unknown
from ledgerq.core.operations import EventSink, UnknownTaskSeen
from ledgerq.core.ports import Completion, WorkerStore
from ledgerq.runtime import outcomes
from ledgerq.runtime.bookkeeper import Bookkeeper
from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.worker")


class Deferrer:
    """Decides and writes the fate of unknown-task jobs; thread-safe (one call per slot)."""

    def __init__(
        self,
        store: WorkerStore,
        book: Bookkeeper,
        policy: unknown.UnknownTaskPolicy,
        *,
        events: EventSink | None = None,
    ) -> None:
        self._store = store
        self._book = book
        self._policy = policy
        self._events = events

    def handle(self, ctx: JobContext) -> Completion | None:
        """The job's outcome if it is to be buried; None if it was put back (or the claim
        was stale, or the store failed: its lease then runs out and the failover returns it)."""
        job = ctx.job
        try:
            verdict = self._store.defer_unknown_task(ctx.claim, policy=self._policy)
        except errors.StoreError as exc:
            log.warning(
                "could not put back a job of an unknown task; its lease will return it",
                job_id=job.id,
                task=job.task,
                error=str(exc),
            )
            self._book.forget(ctx)
            return None
        if verdict is None:
            self._book.forget(ctx)  # no longer ours
            return None
        if verdict.deferred:
            log.warning(
                "job of a task this worker does not know put back",
                job_id=job.id,
                queue=job.queue,
                task=job.task,
                again_in_s=round(verdict.delay_seconds, 1),
                put_backs=verdict.put_backs,
                waited_s=round(verdict.waited_seconds, 1),
                declared_by_a_live_worker=verdict.declared,
            )
            self._emit(job.queue, job.task, "deferred")
            self._book.set_aside(ctx)
            return None
        message = (
            f"unknown task {job.task!r}: no live worker of queue {job.queue!r} declared it for"
            f" {verdict.waited_seconds:.0f} s (UNKNOWN_TASK_GRACE {self._policy.grace_seconds:g} s)"
        )
        log.warning("job buried: no live worker knows its task", job_id=job.id, error=message)
        self._emit(job.queue, job.task, "buried")
        return outcomes.buried(job, unknown.KIND, message)

    def _emit(self, queue: str, task: str, outcome: str) -> None:
        if self._events is not None:
            self._events.emit(UnknownTaskSeen(queue, task, outcome))
