"""LedgerQ: the application object. It owns settings, the task registry, the store and the
client; nothing in ledgerq is global. Connections open on first use, not at import."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import (
    TYPE_CHECKING,
    Concatenate,
    Literal,
    ParamSpec,
    TypeAlias,
    TypeVar,
    Unpack,
    overload,
)

from pydantic import ValidationError

from ledgerq.app import wiring
from ledgerq.app.task import Task
from ledgerq.app.worker_overrides import WorkerOverrides
from ledgerq.config.settings import Settings, load_settings
from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.limits import Breaker, KeyFunction, Rate, RateLimiter, TaskLimits
from ledgerq.core.operations import EventSink
from ledgerq.core.ports import LimitStore, RateLimitBackend, SqlConnection
from ledgerq.core.retry import ExceptionTypes, RetryPolicy, retry_policy
from ledgerq.core.schedules import Schedule
from ledgerq.core.schema import MigrationStatus
from ledgerq.core.tasks import TaskRegistry, TaskSpec, module_name
from ledgerq.core.workflow import FailurePolicy, check_policy
from ledgerq.producer.batch_builder import Batch, BatchCall, BatchClient, TaskRef
from ledgerq.producer.client import Client
from ledgerq.producer.workflow_api import Workflow, WorkflowEventFeed, Workflows
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.job_hooks import JobHooks
from ledgerq.runtime.lock_handles import HeldLock, Locks
from ledgerq.runtime.worker import Worker, new_worker_id

if TYPE_CHECKING:
    from ledgerq.runtime.scheduler import Scheduler, SchedulerOptions

P = ParamSpec("P")
R = TypeVar("R")
ConnectionT = TypeVar("ConnectionT", bound=SqlConnection)
JobHooksT = TypeVar("JobHooksT", bound=JobHooks)
#: A task handler: the job context first, then the task's own parameters ``P``.
Handler: TypeAlias = Callable[Concatenate[JobContext, P], R]


class LedgerQ:
    """The application. ``LedgerQ()`` reads ``LEDGERQ_*`` settings; keyword arguments win."""

    def __init__(self, settings: Settings | None = None, **overrides: object) -> None:
        self.settings = settings or load_settings(**overrides)
        self.registry = TaskRegistry()
        self.schedules: dict[str, Schedule] = {}
        """Periodic tasks declared with ``periodic``, by schedule name."""
        self._parts: wiring.Parts | None = None
        self._client: Client | None = None
        self._locks: Locks | None = None
        self._rates: RateLimitBackend | None = None
        self._job_hooks: list[JobHooks] = []

    def reconfigure(self, **overrides: object) -> None:
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
    def engine(self) -> wiring.LedgerEngine:
        """The ledger's SQLAlchemy engine, for transactions of your own on the ledger's
        database: ``with app.engine.begin() as conn`` around a lock's ``guard(conn)`` and its
        write, or ``enqueue(..., tx=conn)``. On SQLite use this engine: it lets one writer at
        a time into the file per process, which a second engine would not know of."""
        return self.parts.store.engine

    @property
    def parts(self) -> wiring.Parts:
        """The concrete store and codec, created on first use."""
        if self._parts is None:
            self._parts = wiring.build_parts(self.settings)
        return self._parts

    @property
    def client(self) -> Client:
        """The producer API: enqueue, get, list, cancel, retry."""
        if self._client is None:
            self._client = wiring.producer_client(
                self.settings, self.parts, self.registry, spooling=True
            )
        return self._client

    @property
    def batches(self) -> BatchClient:
        """``app.batches.get(id)``, ``.retry_failed(id)``."""
        client = self.client
        return BatchClient(self.parts.batches, client.build, client.announce, self.registry.get)

    def batch(
        self,
        calls: Iterable[BatchCall] | None = None,
        *,
        on_success: TaskRef | None = None,
        on_failure: TaskRef | None = None,
        on_complete: TaskRef | None = None,
        tx: object | None = None,
    ) -> Batch:
        """A batch of jobs whose callbacks (tasks called with ``batch_id=``) run once each:
        ``on_failure`` when a member first dies, ``on_success`` when all succeeded,
        ``on_complete`` when all finished. With ``calls`` (``(task, args)`` or ``(task, args,
        kwargs)``) it is stored at once (in ``tx`` if given); else ``add`` jobs and
        ``enqueue()``, or use it as a ``with`` block that enqueues on a clean exit."""
        batches = self.batches
        batch = batches.new(on_success=on_success, on_failure=on_failure, on_complete=on_complete)
        return batch if calls is None else batches.enqueue(calls, batch, tx=tx)

    @property
    def jobs(self) -> Client:
        """``app.jobs.get(id)``, ``.list(state=...)``, ``.cancel(id)``, ``.retry(id)``."""
        return self.client

    @property
    def locks(self) -> Locks:
        """Distributed locks with fencing tokens (see ``lock``); created on first use."""
        if self._locks is None:
            self._locks = wiring.build_locks(self.settings, self.parts)
        return self._locks

    def lock(
        self, name: str, *, ttl: float, timeout: float | None = None, owner: str | None = None
    ) -> AbstractContextManager[HeldLock]:
        """``with app.lock("name", ttl=30) as lock:`` holds a fleet-wide lock for the block.
        ``lock.token`` is its fencing token, ``lock.renew()`` extends it, ``lock.guard(tx)``
        fences a write. Waits up to ``timeout`` seconds (None: without limit, 0: one try),
        then raises ``LockUnavailable``."""
        return self.locks.hold(name, ttl=ttl, timeout=timeout, owner=owner)

    @overload
    def task(self, fn: Handler[P, R], /) -> Task[P, R]: ...
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
        rate_limit: str | None = None,
        rate_key: KeyFunction | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: KeyFunction | None = None,
        breaker: Breaker | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes = (),
    ) -> Callable[[Handler[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy misreads the positional-only/keyword-only split
        self,
        fn: Handler[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry_backoff: float | RetryPolicy = 1.0,
        rate_limit: str | None = None,
        rate_key: KeyFunction | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: KeyFunction | None = None,
        breaker: Breaker | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes = (),
    ) -> Task[P, R] | Callable[[Handler[P, R]], Task[P, R]]:
        """Register a handler ``fn(ctx, *args, **kwargs)`` (plain or ``async def``).

        ``retry_backoff`` is the first retry's delay in seconds (doubling after, with jitter)
        or a full ``RetryPolicy``. Raises ``ConfigError`` for a bad queue, timeout or policy.
        Fleet-wide limits (docs/limits.md): ``rate_limit`` ("100/s", "20/m", "1000/h") and
        ``concurrency_limit`` (running jobs), each per ``rate_key``/``concurrency_key``
        (a function of the job's arguments) if given, and a circuit ``breaker``.
        Which exceptions retry (docs/tasks.md, "Retries"): ``retry_on`` (one exception class
        or a tuple; others make the job dead at once) and ``dont_retry_on`` (dead at once);
        by default every exception retries. They override a ``RetryPolicy``'s own.
        """
        task_limits = TaskLimits.build(
            rate_limit=rate_limit,
            rate_key=rate_key,
            concurrency_limit=concurrency_limit,
            concurrency_key=concurrency_key,
            breaker=breaker,
        )

        def register(handler: Handler[P, R]) -> Task[P, R]:
            policy = retry_policy(
                max_attempts, retry_backoff, retry_on=retry_on, dont_retry_on=dont_retry_on
            )
            task_name = name or f"{module_name(handler)}.{handler.__qualname__}"
            spec = TaskSpec(task_name, handler, queue, priority, policy, timeout, task_limits)
            return Task(self, self.registry.add(spec))

        return register(fn) if fn is not None else register

    def add_hooks(self, hooks: JobHooksT) -> JobHooksT:
        """Register lifecycle hooks (a ``JobHooks`` subclass instance) that every worker of this
        application calls around each job: ``before_start``, ``after_success``,
        ``after_failure``, ``when_dead`` (docs/hooks.md). Returns ``hooks``."""
        if not isinstance(hooks, JobHooks):
            raise errors.ConfigError(f"add_hooks takes a JobHooks instance, not {hooks!r}")
        self._job_hooks.append(hooks)
        return hooks

    def rate_limiter(self, name: str, rate: str, *, burst: int = 1) -> RateLimiter:
        """A fleet-wide rate limit for application code: ``app.rate_limiter("login", "5/m",
        burst=5).try_acquire(key=user_id)`` is shared by every process of the application
        (Redis when configured, else the database). ``burst`` uses may go at once after a
        quiet spell. Raises ``ConfigError`` for a bad name, rate or burst."""
        return RateLimiter(self._rate_backend(), name, Rate.parse(rate, burst=burst))

    def _rate_backend(self) -> RateLimitBackend:
        if self._rates is None:
            self._rates = wiring.rate_backend(self.settings, self.parts)
        return self._rates

    @property
    def limits(self) -> LimitStore:
        """Circuit breakers and concurrency slots: ``app.limits.list_breakers()``."""
        return self.parts.limits

    def periodic(
        self,
        *,
        cron: str,
        tz: str = "UTC",
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        name: str | None = None,
        queue: str | None = None,
        missed: Literal["skip", "once", "all"] = "skip",
        max_catchup: int = 10,
        overlap: Literal["skip", "allow"] = "allow",
    ) -> Callable[[Handler[P, R] | Task[P, R]], Task[P, R]]:
        """Run a task at every tick of ``cron`` (5 fields, or 6 with seconds first) in time zone
        ``tz``; decorates a handler (registered as a task) or a ``Task``. ``name`` defaults to
        the task's name. ``missed``: skip | once | all (up to ``max_catchup``) for ticks missed
        while no scheduler ran; ``overlap``: skip a tick while the previous run is unfinished,
        or allow. See docs/scheduler.md. Raises ``ConfigError`` for a bad expression, zone,
        policy, arguments that are not JSON, or a duplicate name."""
        try:
            args_json = PayloadCodec(max_bytes=self.settings.max_payload_bytes).encode_args(
                tuple(args), kwargs or {}
            )
        except errors.PayloadError as exc:
            raise errors.ConfigError(f"periodic task arguments: {exc}") from None
        # Imported here: croniter loads only where schedules are declared or fired.
        from ledgerq.runtime import cron as cron_rules

        # Validated now, so a bad expression fails before anything is registered.
        checked = cron_rules.build_schedule(
            name or "unnamed",
            cron_expression=cron,
            task="unnamed",
            args_json=args_json,
            tz=tz,
            queue=queue,
            missed=missed,
            max_catchup=max_catchup,
            overlap=overlap,
        )

        def declare(target: Handler[P, R] | Task[P, R]) -> Task[P, R]:
            task = target if isinstance(target, Task) else self.task(target)
            schedule = dataclasses.replace(checked, name=name or task.name, task=task.name)
            if schedule.name in self.schedules:
                raise errors.ConfigError(f"schedule {schedule.name!r} is declared twice")
            try:
                task.spec.check_arguments(tuple(args), kwargs or {})
            except errors.ArgumentsMismatch as exc:
                raise errors.ConfigError(f"periodic task arguments: {exc}") from None
            self.schedules[schedule.name] = schedule
            return task

        return declare

    def scheduler(
        self,
        *,
        instance_id: str | None = None,
        options: SchedulerOptions | None = None,
        on_fired: Callable[[str], None] | None = None,
    ) -> Scheduler:
        """A scheduler firing this application's schedules (those declared with ``periodic``
        are stored by ``Scheduler.declare``, which ``ledgerq scheduler`` calls at start).
        ``instance_id`` is recorded as ``executed_by`` (defaults to host:pid:random);
        ``on_fired(schedule_name)`` (optional) counts ticks, e.g. for metrics."""
        from ledgerq.runtime.scheduler import SchedulerOptions

        return wiring.build_scheduler(
            self.settings,
            self.parts,
            self.registry,
            options or SchedulerOptions(),
            instance_id=instance_id or new_worker_id(),
            on_fired=on_fired,
        )

    @contextmanager
    def transaction(self, connection: ConnectionT) -> Iterator[ConnectionT]:
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
        signal = wiring.workflow_signal(self.settings, self.parts)
        interval = poll_interval or (5.0 if signal is not None else 1.0)
        return WorkflowEventFeed(
            self.parts.workflows,
            workflow_id=workflow_id,
            after=after,
            signal=signal,
            poll_interval=interval,
        )

    def migrate(self) -> MigrationStatus:
        """Create or upgrade the ledger's tables; return where they stand."""
        return self.parts.migrate()

    def worker(
        self,
        *,
        driver: wiring.Driver = "auto",
        strict: bool = False,
        events: EventSink | None = None,
        **options: Unpack[WorkerOverrides],
    ) -> Worker:
        """A worker for this application's tasks; options override the settings. ``driver``
        picks the transport (``auto``: Redis with fallback when configured); ``strict``
        refuses a Redis that may evict keys; ``events`` (optional) receives the worker's
        JobFinished events, e.g. for metrics."""
        opts = wiring.worker_options(self.settings, **dict(options))
        return wiring.build_worker(
            self.settings,
            self.parts,
            self.registry,
            opts,
            events,
            driver=driver,
            strict=strict,
            job_hooks=self._job_hooks,
        )

    def close(self) -> None:
        """Release database and Redis connections: the lock manager, then the parts (the
        engine, and the one Redis pool with every Redis user built on it)."""
        if self._locks is not None:
            self._locks.manager.close()
            self._locks = None
        if self._client is not None:
            self._client.close()  # its last hints go out before the Redis pool closes
        if self._parts is not None:
            self._parts.close()
            self._parts = None
            self._client = None
            self._rates = None
