"""Job middleware: hooks around the execution of each job a worker runs (dramatiq's and Oban's
model). The limit gate (``runtime/gate.py``), the batch items (``runtime/item_tracker.py``) and the
metrics events (``FinishedEvents``) are middleware; the worker calls them, in this order:

1. ``before_start(ctx, spec)``: in the job's executor slot, once the lease check let it
   start and before the handler runs, in the order the middleware are listed. A hook that
   returns False has put the job back itself (e.g. postponed it): the later hooks and the
   handler do not run, and the worker forgets the job, recorded as requeued.
2. The handler runs (or the unknown-task deferrer decides the job's fate).
3. ``after_written(completion, applied, ctx)``: on the completer's thread, for each outcome
   the ledger applied (``applied``) or refused as stale, in reverse order. ``ctx`` is the
   attempt's context, or None when the worker no longer held the attempt.
   ``after_dropped(ctx)`` instead, in reverse order, for a run the worker gives up without
   an outcome (taken away before it started, abandoned, or its unknown task's put-back
   failed).

The worker lists its middleware as gate, items, metrics: a job the gate holds back costs no
other hook, and the metrics see an outcome before the gate settles its limits. Only the hooks
a middleware overrides are called, from tuples fixed when the worker is built: a job costs
one call per hook and allocates nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ledgerq.core.operations import EventSink, JobFinished

if TYPE_CHECKING:
    from ledgerq.core.items import JobItemStore
    from ledgerq.core.ports import Completion
    from ledgerq.core.tasks import TaskSpec
    from ledgerq.runtime.context import JobContext


class JobMiddleware:
    """Base of a job middleware: every hook does nothing until overridden."""

    def before_start(self, ctx: JobContext, spec: TaskSpec | None) -> bool:
        """Before the handler runs; False: the job was put back and must not run."""
        return True

    def after_written(self, completion: Completion, applied: bool, ctx: JobContext | None) -> None:
        """After the ledger applied (or refused as stale) an attempt's outcome."""

    def after_dropped(self, ctx: JobContext) -> None:
        """After the worker gave up a run that reports no outcome."""


BeforeStart = Callable[["JobContext", "TaskSpec | None"], bool]
AfterWritten = Callable[["Completion", bool, "JobContext | None"], None]
AfterDropped = Callable[["JobContext"], None]


class Hooks:
    """The overridden hooks of a list of middleware, in the documented call order."""

    def __init__(self, middleware: Sequence[JobMiddleware]) -> None:
        self.before_start: tuple[BeforeStart, ...] = tuple(
            m.before_start for m in middleware if _overrides(m, "before_start")
        )
        backwards = tuple(reversed(middleware))
        self.after_written: tuple[AfterWritten, ...] = tuple(
            m.after_written for m in backwards if _overrides(m, "after_written")
        )
        self.after_dropped: tuple[AfterDropped, ...] = tuple(
            m.after_dropped for m in backwards if _overrides(m, "after_dropped")
        )


def _overrides(middleware: JobMiddleware, hook: str) -> bool:
    return getattr(type(middleware), hook) is not getattr(JobMiddleware, hook)


class FinishedEvents(JobMiddleware):
    """Metrics: a ``JobFinished`` event per outcome the ledger applied to an attempt this
    worker held, with the body's own run time (0 for an attempt whose body never ran)."""

    def __init__(self, events: EventSink) -> None:
        self._events = events

    def after_written(self, completion: Completion, applied: bool, ctx: JobContext | None) -> None:
        """Emit the attempt's ``JobFinished``."""
        if applied and ctx is not None:
            job = ctx.job
            self._events.emit(
                JobFinished(
                    job.queue, job.task, completion.state.value, completion.ran_seconds or 0.0
                )
            )


class ItemsMiddleware(JobMiddleware):
    """Gives each job about to start the item store its ``ctx.items()`` records to (a job
    middleware)."""

    def __init__(self, store: JobItemStore) -> None:
        self._store = store

    def before_start(self, ctx: JobContext, spec: TaskSpec | None) -> bool:
        """Attach the item store."""
        ctx.item_store = self._store
        return True
