"""LedgerQ: the application object. It owns settings, the task registry, the store and the
client; nothing in ledgerq is global. Connections open on first use, not at import."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic import ValidationError

from ledgerq import bootstrap
from ledgerq.client import Client
from ledgerq.config import Settings, load_settings
from ledgerq.core import errors
from ledgerq.core.job import EnqueueResult
from ledgerq.core.operations import EventSink
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.core.workflow import FailurePolicy, StepCall, check_policy
from ledgerq.runtime.worker import Worker
from ledgerq.workflows import Workflow, WorkflowEventFeed, Workflows

P = ParamSpec("P")
R = TypeVar("R")

#: Keyword arguments of ``Task.enqueue`` that are job options, not task arguments.
JOB_OPTIONS = frozenset(
    {
        "queue",
        "priority",
        "delay",
        "run_at",
        "dedupe_key",
        "max_attempts",
        "timeout",
        "held",
        "expires_at",
        "tx",
    }
)


class Task(Generic[P, R]):
    """A registered task: call it to run the handler directly, ``enqueue`` it to run it on a
    worker. Options named in ``JOB_OPTIONS`` are taken by ``enqueue`` and never passed on."""

    def __init__(self, app: LedgerQ, spec: TaskSpec) -> None:
        self.app = app
        self.spec = spec
        functools.update_wrapper(self, spec.fn)

    @property
    def name(self) -> str:
        """The registered name jobs refer to."""
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.spec.fn(*args, **kwargs)  # type: ignore[no-any-return]

    def s(self, *args: Any, **kwargs: Any) -> StepCall:
        """This task called with these arguments, as a workflow step (``wf.step(task.s(1))``)."""
        return StepCall(self.spec.name, args, kwargs)

    def enqueue(
        self,
        *args: Any,
        queue: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
        run_at: datetime | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        held: bool = False,
        expires_at: datetime | None = None,
        tx: object | None = None,
        **kwargs: Any,
    ) -> EnqueueResult:
        """Create one job; raise ``InvalidJob`` (nothing stored) on a bad request.
        ``expires_at``: a job not started by then is deleted by the reconciler."""
        job = self.app.client.build(
            self.spec,
            args,
            kwargs,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            dedupe_key=dedupe_key,
            max_attempts=max_attempts,
            timeout=timeout,
            held=held,
            expires_at=expires_at,
        )
        return self.app.client.enqueue([job], tx=tx)[0]

    def enqueue_many(
        self,
        calls: Iterable[Sequence[Any] | dict[str, Any]],
        *,
        delay: float = 0.0,
        priority: int | None = None,
        queue: str | None = None,
        tx: object | None = None,
    ) -> list[EnqueueResult]:
        """Create one job per item (a tuple of positional or a dict of keyword arguments) in
        one bulk insert; if any item is invalid nothing is stored."""
        client = self.app.client
        jobs = [
            client.build(
                self.spec,
                () if isinstance(call, dict) else tuple(call),
                call if isinstance(call, dict) else None,
                delay=delay,
                priority=priority,
                queue=queue,
            )
            for call in calls
        ]
        return client.enqueue(jobs, tx=tx) if jobs else []


class LedgerQ:
    """The application. ``LedgerQ()`` reads ``LEDGERQ_*`` settings; keyword arguments win."""

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        self.settings = settings or load_settings(**overrides)
        self.registry = TaskRegistry()
        self._parts: bootstrap.Parts | None = None
        self._client: Client | None = None

    def reconfigure(self, **overrides: Any) -> None:
        """Replace settings before the first connection (used for CLI flags such as
        ``--database-url``); raise ``ConfigError`` once the application is connected."""
        if self._parts is not None:
            raise errors.ConfigError("settings cannot change after the application connected")
        merged = {**self.settings.model_dump(), **overrides}
        try:
            self.settings = Settings(**merged)
        except ValidationError as exc:
            raise errors.ConfigError(f"invalid settings: {exc.errors()[0]['msg']}") from None

    @property
    def parts(self) -> bootstrap.Parts:
        """The concrete store and codec, created on first use."""
        if self._parts is None:
            self._parts = bootstrap.build_parts(self.settings)
        return self._parts

    @property
    def client(self) -> Client:
        """The producer API: enqueue, get, list, cancel, retry."""
        if self._client is None:
            self._client = Client(
                self.parts.store,
                bootstrap.producer_transport(self.settings),
                self.registry,
                self.parts.codec,
            )
        return self._client

    @property
    def jobs(self) -> Client:
        """``app.jobs.get(id)``, ``.list(state=...)``, ``.cancel(id)``, ``.retry(id)``."""
        return self.client

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry_backoff: float | RetryPolicy = 1.0,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy misreads the positional-only/keyword-only split
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry_backoff: float | RetryPolicy = 1.0,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a handler ``fn(ctx, *args, **kwargs)`` (plain or ``async def``).

        ``retry_backoff`` is the first retry's delay in seconds (doubling after, with jitter)
        or a full ``RetryPolicy``. Raises ``ConfigError`` for a bad queue, timeout or policy.
        """

        def register(handler: Callable[P, R]) -> Task[P, R]:
            policy = (
                retry_backoff
                if isinstance(retry_backoff, RetryPolicy)
                else RetryPolicy(max_attempts=max_attempts, base_seconds=float(retry_backoff))
            )
            task_name = name or f"{handler.__module__}.{handler.__qualname__}"
            spec = TaskSpec(task_name, handler, queue, priority, policy, timeout)
            return Task(self, self.registry.add(spec))

        return register(fn) if fn is not None else register

    @contextmanager
    def transaction(self, connection: Any) -> Iterator[Any]:
        """Enqueue inside the caller's SQLAlchemy connection: a transaction is begun if none
        is open and committed on exit; jobs enqueued with ``tx=`` exist only if it commits."""
        if connection.in_transaction():
            yield connection
            return
        with connection.begin():
            yield connection

    def workflow(self, name: str, *, on_failure: str | FailurePolicy = "stop") -> Workflow:
        """Start building a workflow (a DAG of steps, each a job): add steps with
        ``.step(task.s(...), after=[...])``, then ``.enqueue()``. ``on_failure``: ``stop``
        cancels every step not started when one fails; ``continue`` cancels only its
        dependents. Raise ``InvalidJob`` on a bad name or policy."""
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise errors.InvalidJob("a workflow name must be 1 to 200 characters")
        return Workflow(self.client, self.parts.workflows, name, check_policy(on_failure))

    @property
    def workflows(self) -> Workflows:
        """Stored workflows: ``get``, ``list``, ``cancel``, ``retry``."""
        return Workflows(self.parts.workflows)

    def workflow_events(
        self, workflow_id: str | None = None, *, after: int = 0, poll_interval: float | None = None
    ) -> WorkflowEventFeed:
        """A reader of the workflow event feed (``workflow:step:complete`` and others) from
        event id ``after``; with Redis configured it is woken by pub/sub, else it polls every
        ``poll_interval`` seconds (default 1, or 5 with Redis). Close it when done."""
        signal = bootstrap.workflow_signal(self.settings)
        interval = poll_interval or (5.0 if signal is not None else 1.0)
        return WorkflowEventFeed(
            self.parts.workflows,
            workflow_id=workflow_id,
            after=after,
            signal=signal,
            poll_interval=interval,
        )

    def migrate(self) -> Any:
        """Create or upgrade the ledger's tables."""
        return self.parts.migrate()

    def worker(
        self,
        *,
        driver: bootstrap.Driver = "auto",
        strict: bool = False,
        events: EventSink | None = None,
        **options: Any,
    ) -> Worker:
        """A worker for this application's tasks; options override the settings. ``driver``
        picks the transport (``auto``: Redis with fallback when configured); ``strict``
        refuses a Redis that may evict keys; ``events`` (optional) receives the worker's
        JobFinished events, e.g. for metrics."""
        opts = bootstrap.worker_options(self.settings, **options)
        return bootstrap.build_worker(
            self.settings,
            self.parts,
            self.registry,
            opts,
            events,
            driver=driver,
            strict=strict,
        )

    def close(self) -> None:
        """Release database connections."""
        if self._parts is not None:
            self._parts.close()
            self._parts = None
            self._client = None
