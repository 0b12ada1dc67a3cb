"""Task: the handle ``@app.task`` returns. Calling it runs the function in-process; ``enqueue``
and ``enqueue_many`` store jobs through the application's client; ``s`` makes a workflow step."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Generic, ParamSpec, Protocol, TypeVar

from ledgerq.core import errors
from ledgerq.core.job import JOB_OPTION_NAMES, EnqueueResult, JobOptions
from ledgerq.core.tasks import TaskSpec
from ledgerq.core.workflow import StepCall

if TYPE_CHECKING:
    from ledgerq.producer.client import Client

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
    worker. Options named in ``JOB_OPTIONS`` are taken by ``enqueue`` and never passed on."""

    def __init__(self, app: TaskOwner, spec: TaskSpec) -> None:
        self.app = app
        self.spec = spec
        functools.update_wrapper(self, spec.fn)

    @property
    def name(self) -> str:
        """The registered name jobs refer to."""
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.spec.fn(*args, **kwargs)  # type: ignore[no-any-return]

    def s(self, *args: object, **kwargs: object) -> StepCall:
        """This task called with these arguments, as a workflow step (``wf.step(task.s(1))``)."""
        return StepCall(self.spec.name, args, kwargs)

    def enqueue(self, *args: object, tx: object | None = None, **kwargs: object) -> EnqueueResult:
        """Create one job; raise ``InvalidJob`` (nothing stored) on a bad request. Keyword
        arguments named like a field of ``JobOptions`` are job options (``queue``,
        ``priority``, ``delay``, ``run_at``, ``dedupe_key``, ``dedupe_for``, ``max_attempts``,
        ``timeout``, ``held``, ``expires_at``); the rest go to the task.
        ``expires_at``: a job not started by then is deleted by the reconciler.
        ``dedupe_key``: while a job with the key is unfinished (or, with ``dedupe_for``
        seconds, within that window after this enqueue) the result is that job's id with
        ``duplicate=True`` and nothing new is stored. With ``tx`` the job exists only if that
        transaction commits."""
        options = JobOptions.take(kwargs)
        job = self.app.client.build(self.spec, args, kwargs, options)
        return self.app.client.enqueue([job], tx=tx)[0]

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
    ) -> list[EnqueueResult]:
        """Create one job per item (a tuple of positional or a dict of keyword arguments) in
        one bulk insert; if any item is invalid nothing is stored. ``dedupe_keys`` (one per
        item, None for none) and ``dedupe_for`` work as in ``enqueue``; a key repeated within
        the batch makes the later item a duplicate of the first."""
        client = self.app.client
        calls = list(calls)
        keys = list(dedupe_keys) if dedupe_keys is not None else [None] * len(calls)
        if len(keys) != len(calls):
            raise errors.InvalidJob(f"{len(keys)} dedupe_keys for {len(calls)} calls")
        jobs = [
            client.build(
                self.spec,
                () if isinstance(call, dict) else tuple(call),
                call if isinstance(call, dict) else None,
                delay=delay,
                priority=priority,
                queue=queue,
                dedupe_key=key,
                dedupe_for=dedupe_for if key is not None else None,
            )
            for call, key in zip(calls, keys, strict=True)
        ]
        return client.enqueue(jobs, tx=tx) if jobs else []
