"""Task: the handle ``@app.task`` returns. Calling it runs the function in-process; ``enqueue``
and ``enqueue_many`` store jobs through the application's client; ``s`` makes a workflow step."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Generic, ParamSpec, Protocol, TypeVar

from ledgerq.core.job import JOB_OPTION_NAMES, JobOptions
from ledgerq.core.tasks import TaskSpec
from ledgerq.core.workflow import StepCall

if TYPE_CHECKING:
    from ledgerq.producer.client import Client
    from ledgerq.producer.job_handle import JobHandle
    from ledgerq.runtime.context import JobContext

P = ParamSpec("P")
R = TypeVar("R")

#: Keyword arguments of ``Task.enqueue`` that are job options, not task arguments.
JOB_OPTIONS = JOB_OPTION_NAMES | {"tx"}


class TaskOwner(Protocol):
    """What a task needs of the application that registered it (``LedgerQ`` is one)."""

    @property
    def client(self) -> Client:
        """The producer client its jobs are enqueued through."""
        ...


class Task(Generic[P, R]):
    """A registered task: call it to run the handler directly, ``enqueue`` it to run it on a
    worker. ``P`` is what the handler takes after the job context, so mypy checks
    ``enqueue``'s arguments against the handler."""

    def __init__(self, app: TaskOwner, spec: TaskSpec) -> None:
        self.app = app
        self.spec = spec
        functools.update_wrapper(self, spec.fn)

    @property
    def name(self) -> str:
        """The registered name jobs refer to."""
        return self.spec.name

    def __call__(self, ctx: JobContext, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.spec.fn(ctx, *args, **kwargs)  # type: ignore[no-any-return]

    def s(self, *args: object, **kwargs: object) -> StepCall:
        """This task called with these arguments, as a workflow step (``wf.step(task.s(1))``).
        Not typed with the handler's parameters: a step with dependencies also receives
        ``upstream`` when it runs; the arguments are checked when the step is added."""
        return StepCall(self.spec.name, args, kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
        run_at: datetime | None = None,
        dedupe_key: str | None = None,
        dedupe_for: float | timedelta | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        held: bool = False,
        expires_at: datetime | None = None,
        tx: object | None = None,
    ) -> TaskCall[P, R]:
        """This task with job options, whose ``enqueue`` passes every argument to the handler:
        ``send.options(priority=1, delay=10).enqueue(42)``. ``expires_at``: a job not started
        by then is deleted by the reconciler. ``dedupe_key``: while a job with the key is
        unfinished (or, with ``dedupe_for`` seconds, within that window after this enqueue)
        the result is that job's id with ``duplicate=True`` and nothing new is stored. With
        ``tx`` the job exists only if that transaction commits."""
        job_options = JobOptions(
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            dedupe_key=dedupe_key,
            dedupe_for=dedupe_for,
            max_attempts=max_attempts,
            timeout=timeout,
            held=held,
            expires_at=expires_at,
        )
        return TaskCall(self, job_options, tx)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Create one job; raise ``InvalidJob`` (nothing stored) on a bad request, and
        ``ArgumentsMismatch`` when the arguments do not fit the handler. The typed way to
        give job options is ``options(...)``; as a shorthand, a keyword named like one
        (``queue``, ``priority``, ``delay``, ``run_at``, ``dedupe_key``, ``dedupe_for``,
        ``max_attempts``, ``timeout``, ``held``, ``expires_at``, ``tx``) is taken as that
        option unless the handler has a parameter of that name, which always wins. The
        returned handle's ``wait(timeout)`` gives the job's result."""
        named: dict[str, object] = dict(kwargs)
        taken = [name for name in JOB_OPTIONS & named.keys() if not self.spec.takes_keyword(name)]
        tx = named.pop("tx", None) if "tx" in taken else None
        options = JobOptions.take(named, taken)
        return self.app.client.enqueue(
            [self.app.client.build(self.spec, args, named, options)], tx=tx
        )[0]

    def enqueue_many(
        self,
        calls: Iterable[Sequence[object] | dict[str, object]],
        *,
        delay: float = 0.0,
        priority: int | None = None,
        queue: str | None = None,
        tx: object | None = None,
        dedupe_keys: Sequence[str | None] | None = None,
        dedupe_for: float | timedelta | None = None,
    ) -> list[JobHandle]:
        """Create one job per item (a tuple of positional or a dict of keyword arguments) in
        one bulk insert; if any item is invalid nothing is stored. ``dedupe_keys`` (one per
        item, None for none) and ``dedupe_for`` work as in ``enqueue``; a key repeated within
        the batch makes the later item a duplicate of the first."""
        client = self.app.client
        options = JobOptions(delay=delay, priority=priority, queue=queue, dedupe_for=dedupe_for)
        jobs = client.build_many(
            self.spec,
            [((), call) if isinstance(call, dict) else (tuple(call), {}) for call in calls],
            options,
            None if dedupe_keys is None else list(dedupe_keys),
        )
        return client.enqueue(jobs, tx=tx) if jobs else []


class TaskCall(Generic[P, R]):
    """A task with its job options fixed (``task.options(...)``): every argument of
    ``enqueue`` goes to the handler, none is mistaken for an option."""

    def __init__(self, task: Task[P, R], options: JobOptions, tx: object | None) -> None:
        self.task = task
        self.job_options = options
        self.tx = tx

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Create one job with these options (see ``Task.options``)."""
        client = self.task.app.client
        job = client.build(self.task.spec, args, dict(kwargs), self.job_options)
        return client.enqueue([job], tx=self.tx)[0]
