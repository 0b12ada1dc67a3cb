"""JobHooks: the application's lifecycle hooks around each job a worker runs (tracing, metrics,
error reporting). Subclass ``JobHooks``, override what you need and register an instance with
``app.add_hooks(...)``; every worker of the application calls them.

When each hook runs, on the job's executor slot thread (the handler's thread for a plain
handler; an ``async def`` handler runs on the worker's event loop in between):

1. ``before_start(ctx)``: the job is about to run (its lease checked, its limits admitted).
2. The handler runs.
3. Exactly one of:
   - ``after_success(ctx, result)``: the handler returned ``result``;
   - ``after_failure(ctx, error, will_retry)``: it raised (or timed out) and the job will
     run again (``will_retry`` True), or was cancelled from inside (``Cancel``, False);
   - ``when_dead(ctx, error)``: it raised and the job is dead (attempts spent, an
     exception ``retry_on`` / ``dont_retry_on`` rule out, or ``Discard``).

The "after" hooks run once the outcome is decided and before it is written to the ledger, so
they see the exception object itself (for a reporter's traceback) but a write may still find
the job taken away (a stale attempt's outcome is refused as always). Hooks run in the order
they were added, the "after" ones in reverse (the first added wraps the others, as
middleware does). A hook that raises is logged and ignored: it never changes a job's outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from ledgerq.core.states import JobState

if TYPE_CHECKING:
    from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.hooks")


class JobHooks:
    """Base of the application's job hooks: each does nothing until overridden."""

    def before_start(self, ctx: JobContext) -> None:
        """The job is about to run."""

    def after_success(self, ctx: JobContext, result: object) -> None:
        """The handler returned ``result``."""

    def after_failure(self, ctx: JobContext, error: BaseException, will_retry: bool) -> None:
        """The handler failed and the job is not dead: it runs again if ``will_retry``."""

    def when_dead(self, ctx: JobContext, error: BaseException) -> None:
        """The handler failed and the job is dead: it will not run again by itself."""


class HookRunner:
    """Calls a list of ``JobHooks`` in the documented order, each failure logged and ignored.
    Only hooks a subclass overrides are called (a job costs nothing for the others)."""

    def __init__(self, hooks: Sequence[JobHooks]) -> None:
        forwards = tuple(hooks)
        backwards = tuple(reversed(forwards))
        self._before_start = tuple(h for h in forwards if _overrides(h, "before_start"))
        self._after_success = tuple(h for h in backwards if _overrides(h, "after_success"))
        self._after_failure = tuple(h for h in backwards if _overrides(h, "after_failure"))
        self._when_dead = tuple(h for h in backwards if _overrides(h, "when_dead"))

    def __bool__(self) -> bool:
        return bool(
            self._before_start or self._after_success or self._after_failure or self._when_dead
        )

    def before_start(self, ctx: JobContext) -> None:
        """Run every ``before_start``."""
        for hooks in self._before_start:
            _guarded(hooks.before_start, ctx)

    def after_success(self, ctx: JobContext, result: object) -> None:
        """Run every ``after_success``."""
        for hooks in self._after_success:
            _guarded(hooks.after_success, ctx, result)

    def after_failure(self, ctx: JobContext, error: BaseException, will_retry: bool) -> None:
        """Run every ``after_failure``."""
        for hooks in self._after_failure:
            _guarded(hooks.after_failure, ctx, error, will_retry)

    def when_dead(self, ctx: JobContext, error: BaseException) -> None:
        """Run every ``when_dead``."""
        for hooks in self._when_dead:
            _guarded(hooks.when_dead, ctx, error)

    def report(
        self, ctx: JobContext, state: JobState, value: object, error: BaseException | None
    ) -> None:
        """Run the "after" hooks that fit an attempt that ended in ``state``."""
        if state is JobState.SUCCEEDED:
            self.after_success(ctx, value)
        elif state is JobState.DEAD:
            self.when_dead(ctx, error or RuntimeError("the job is dead"))
        elif error is not None:
            self.after_failure(ctx, error, state is JobState.FAILED)


def _overrides(hooks: JobHooks, name: str) -> bool:
    return getattr(type(hooks), name) is not getattr(JobHooks, name)


def _guarded(hook: object, *args: object) -> None:
    try:
        hook(*args)  # type: ignore[operator]
    except Exception as exc:  # an application's hook must never change a job's outcome
        log.warning(
            "a job hook failed", hook=getattr(hook, "__qualname__", repr(hook)), error=repr(exc)
        )
