"""The composition root: turns Settings into the concrete store, transport and worker.

``build_parts`` (``parts.py``, re-exported here) makes each shared part once: the database
engine and, with ``REDIS_URL``, one ``RedisPool`` (one redis-py client and connection pool per
application). Every function here that needs Redis takes ``parts`` and lends that pool's
client; ``Parts.close`` closes both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, cast

import structlog

from ledgerq.app.parts import READ_APPLICATION_NAME as READ_APPLICATION_NAME
from ledgerq.app.parts import Parts as Parts
from ledgerq.app.parts import build_parts as build_parts
from ledgerq.app.parts import database_pooler as database_pooler
from ledgerq.app.parts import lend_transport
from ledgerq.app.spool_wiring import build_spool
from ledgerq.config.settings import Settings
from ledgerq.core import errors, redis_url
from ledgerq.core.limits import FallbackRates
from ledgerq.core.operations import EventSink
from ledgerq.core.ports import ControlChannel, HintSender, RateLimitBackend, Transport
from ledgerq.core.retention import HistoryRetention
from ledgerq.core.tasks import TaskRegistry
from ledgerq.producer.announcer import Announcer
from ledgerq.producer.client import Client
from ledgerq.producer.spooler import Spooler
from ledgerq.runtime.gate import LimitGate
from ledgerq.runtime.job_hooks import JobHooks
from ledgerq.runtime.job_log import job_log_lines
from ledgerq.runtime.lock_handles import Locks
from ledgerq.runtime.middleware import FinishedEvents, ItemsMiddleware, JobMiddleware
from ledgerq.runtime.reconciler import ReconcilePolicy, Reconciler
from ledgerq.runtime.worker import Worker
from ledgerq.runtime.worker_setup import WorkerDeps, WorkerOptions
from ledgerq.store.engine import LedgerEngine as LedgerEngine  # the type of app.engine
from ledgerq.store.lock_store import SqlLocks
from ledgerq.store.schedule_store import SqlScheduleStore
from ledgerq.transport.polling import PollingTransport
from ledgerq.transport.redis_pool import RedisPool

if TYPE_CHECKING:
    from ledgerq.runtime.scheduler import Scheduler, SchedulerOptions
    from ledgerq.transport.redis import RedisTransport
    from ledgerq.transport.redis_locks import RedisLockManager

log = structlog.get_logger("ledgerq.app.wiring")

Driver = Literal["auto", "redis", "dbpoll"]


def workflow_signal(settings: Settings, parts: Parts) -> RedisTransport | None:
    """The Redis lane that wakes workflow event readers, when Redis is configured."""
    return redis_transport(settings, parts) if parts.redis is not None else None


def resolve_driver(settings: Settings, driver: Driver) -> Literal["redis", "dbpoll", "auto"]:
    """Check a driver choice against the settings: ``auto`` is Redis with fallback when a
    Redis URL is set, else ``dbpoll``; ``redis`` needs a URL."""
    if driver == "redis" and settings.redis_url is None:
        raise errors.ConfigError("--driver redis needs LEDGERQ_REDIS_URL")
    if driver == "auto" and settings.redis_url is None:
        return "dbpoll"
    return driver


def redis_pool(parts: Parts) -> RedisPool:
    """The Redis pool of ``parts``; ``ConfigError`` when no Redis URL is configured."""
    if parts.redis is None:
        raise errors.ConfigError("this needs LEDGERQ_REDIS_URL")
    return parts.redis


def redis_transport(
    settings: Settings, parts: Parts, fallback: PollingTransport | None = None
) -> RedisTransport:
    """A RedisTransport in the namespace of ``settings`` on the client of ``parts``' pool,
    closed with the pool if its user has not closed it by then."""
    return lend_transport(settings, redis_pool(parts), fallback)


def check_not_cluster(transport: RedisTransport) -> None:
    """Refuse a Redis Cluster node with ``ConfigError`` (why: ``CLUSTER_REFUSAL``). An
    unreachable server is let pass: the eviction check logs it, and the worker polls."""
    try:
        clustered = transport.cluster_enabled()
    except errors.TransportError:
        return
    if clustered:
        raise errors.ConfigError(redis_url.CLUSTER_REFUSAL)


def check_eviction_policy(transport: RedisTransport, *, strict: bool) -> str | None:
    """Warn loudly (or, ``strict``, refuse) when Redis may evict keys: a hint lost to eviction
    costs latency until the reconciler re-sends it. Returns the policy seen."""
    try:
        policy = transport.eviction_policy()
    except errors.TransportError as exc:
        if strict:
            raise errors.ConfigError(f"--strict: cannot check Redis: {exc}") from None
        log.warning("Redis is unreachable at start; polling until it answers", error=str(exc))
        return None
    if policy is None:
        log.warning(
            "cannot read Redis maxmemory-policy (CONFIG GET refused); make sure it is noeviction"
        )
    elif policy != "noeviction":
        message = (
            f"Redis maxmemory-policy is {policy!r}, not 'noeviction': Redis may evict job ids "
            "(no job is lost, but each costs up to REQUEUE_AFTER of latency)"
        )
        if strict:
            raise errors.ConfigError(f"--strict: {message}")
        log.warning("WARNING " + message)
    return policy


def polling_transport(
    parts: Parts, queues: tuple[str, ...], *, fallback: bool = False
) -> PollingTransport:
    """Polling, woken by the database's driver where it can (LISTEN/NOTIFY on PostgreSQL). As
    Redis's ``fallback``, it listens only once it is first used."""
    return PollingTransport(parts.store.dialect.waker(set(queues), lazy=fallback))


def build_transport(
    settings: Settings,
    parts: Parts,
    queues: tuple[str, ...],
    *,
    driver: Driver = "auto",
    strict: bool = False,
) -> Transport:
    """The worker's transport: ``dbpoll``; ``redis``; or ``auto`` (Redis, falling back to
    polling while Redis fails)."""
    resolved = resolve_driver(settings, driver)
    if resolved == "dbpoll":
        return polling_transport(parts, queues)
    fallback = polling_transport(parts, queues, fallback=True) if resolved == "auto" else None
    transport = redis_transport(settings, parts, fallback)
    try:
        check_not_cluster(transport)
        check_eviction_policy(transport, strict=strict)
        if resolved == "redis":
            transport.ping()
    except errors.LedgerqError:
        transport.close()
        raise
    return transport


def producer_transport(settings: Settings, parts: Parts) -> Transport:
    """The producer's transport: Redis when configured (a failing push never fails an
    enqueue), else nothing to send."""
    if parts.redis is None:
        return PollingTransport()
    return redis_transport(settings, parts)


def producer_client(
    settings: Settings,
    parts: Parts,
    registry: TaskRegistry,
    *,
    events: EventSink | None = None,
    spooling: bool = False,
) -> Client:
    """A producer Client on ``parts``: its transport and hint sender from ``settings``, its
    enqueues counted by ``events``; with ``spooling``, enqueues the database cannot take go to
    the spool (``SPOOL``) and ``wait`` wakes on the ledger's finish signal (the application's
    own client)."""
    transport = producer_transport(settings, parts)
    spool = build_spool(settings, parts.redis) if spooling else None
    return Client(
        parts.store,
        transport,
        registry,
        parts.codec,
        events=events,
        finished=parts.finished if spooling else None,
        spooler=None if spool is None else Spooler(spool, parts.store),
        hint_sender=hint_sender(settings, parts, transport),
    )


def hint_sender(settings: Settings, parts: Parts, transport: Transport) -> HintSender | None:
    """How a producer sends hints to Redis (``REDIS_PUSH``): ``pipelined`` writes without
    waiting for the reply, ``background`` from a thread of its own, ``inline`` (None) with
    ``transport.push`` before ``enqueue`` returns. Without Redis nothing is sent (None);
    ``transport`` is then the polling one, else ``producer_transport``'s RedisTransport."""
    if parts.redis is None or settings.redis_push == "inline":
        return None
    if settings.redis_push == "background":
        return Announcer(transport)
    return cast("RedisTransport", transport).pipelined_sender()


def _logs_info(settings: Settings) -> bool:
    return settings.log_level in ("DEBUG", "INFO")


def reconcile_policy(settings: Settings) -> ReconcilePolicy:
    """The reconciler's policy from settings."""
    return ReconcilePolicy(
        interval_seconds=settings.reconcile_interval,
        stuck_after_seconds=settings.stuck_after,
        requeue_after_seconds=settings.requeue_after,
        retention_succeeded_seconds=settings.retention_succeeded,
        retention_failed_seconds=settings.retention_failed,
        artifact_root=settings.artifact_root,
        workflow_stuck_after_seconds=settings.workflow_stuck_after,
        history=HistoryRetention(
            health_checks_seconds=settings.retention_health_checks,
            failover_events_seconds=settings.retention_failover_events,
            assignments_seconds=settings.retention_assignments,
            schedule_runs_seconds=settings.retention_schedule_runs,
            job_items_seconds=settings.retention_job_items,
            batches_seconds=settings.retention_batches,
        ),
    )


def build_reconciler(settings: Settings, parts: Parts, transport: Transport) -> Reconciler:
    """A reconciler for ``ledgerq reconcile``."""
    return Reconciler(
        parts.repair,
        parts.store,
        transport,
        reconcile_policy(settings),
        workflows=parts.workflows,
    )


def build_worker(
    settings: Settings,
    parts: Parts,
    registry: TaskRegistry,
    options: WorkerOptions,
    events: EventSink | None = None,
    *,
    driver: Driver = "auto",
    strict: bool = False,
    job_hooks: Sequence[JobHooks] = (),
) -> Worker:
    """A worker wired to the store and transport of ``settings``; ``events`` (optional)
    receives its JobFinished events (metrics); ``job_hooks`` are the application's."""
    transport = build_transport(settings, parts, options.queues, driver=driver, strict=strict)
    # A worker on Redis is woken by stop messages, then reads its stop request from the
    # database: the message itself carries no authority.
    # Only a worker with Redis configured can hold a RedisTransport: a polling worker never
    # imports redis-py (a tenth of its start-up).
    on_redis = parts.redis is not None and isinstance(transport, _redis_class())
    control = cast("ControlChannel", transport) if on_redis else None
    # The job middleware, in the order runtime/middleware.py documents.
    middleware: list[JobMiddleware] = [
        LimitGate(parts.limits, rate_backend(settings, parts), parts.codec),
        ItemsMiddleware(parts.items),
    ]
    if events is not None:
        middleware.append(FinishedEvents(events))
    deps = WorkerDeps(
        store=parts.store,
        transport=transport,
        registry=registry,
        codec=parts.codec,
        middleware=tuple(middleware),
        events=events,
        repair=parts.repair,
        fleet_store=parts.fleet,
        control=control,
        workflows=parts.workflows,
        # The start and success lines are INFO: below that level they are not even built.
        job_hooks=(job_log_lines(every_job=settings.log_jobs and _logs_info(settings)), *job_hooks),
        spool=build_spool(settings, parts.redis),
    )
    return Worker(deps, options)


def rate_backend(settings: Settings, parts: Parts) -> RateLimitBackend:
    """Where rate windows live: Redis when configured (the database while Redis fails),
    else the database."""
    if parts.redis is None:
        return parts.limits
    from ledgerq.transport.redis_limits import RedisRateLimiter

    redis_limiter = RedisRateLimiter(
        parts.redis.url, namespace=settings.namespace, client=parts.redis.client()
    )
    return FallbackRates(redis_limiter, parts.limits)


def preload(settings: Settings) -> None:
    """Import what a worker of ``settings`` loads only when it connects (the database's
    driver and client library, the Redis transport), without connecting: a manager does it
    before it forks its children, which then start with all of it imported."""
    from ledgerq.store.engine import normalize_url

    for url in (settings.database_url, settings.database_read_url):
        if url is not None:
            normalize_url(url.get_secret_value())
    if settings.redis_url is not None:
        _redis_class()


def _redis_class() -> type:
    from ledgerq.transport.redis import RedisTransport

    return RedisTransport


def control_channel(settings: Settings, parts: Parts) -> RedisTransport | None:
    """The Redis lane for stop requests when Redis is configured (operators' commands)."""
    return redis_transport(settings, parts) if parts.redis is not None else None


def worker_options(settings: Settings, **overrides: object) -> WorkerOptions:
    """WorkerOptions from settings, with explicit (non-None) overrides winning. The
    reconciler runs inside every worker unless ``reconcile=False`` is given."""
    values: dict[str, object] = {
        "queues": settings.queues,
        "concurrency": settings.concurrency,
        "batch_size": settings.batch_size,
        "prefetch": settings.prefetch,
        "poll_interval_seconds": settings.poll_interval,
        "heartbeat_interval_seconds": settings.heartbeat_interval,
        "lease_seconds": settings.worker_ttl,
        "shutdown_grace_seconds": settings.shutdown_grace,
        "reconcile": reconcile_policy(settings),
        "health_check_interval_seconds": settings.worker_health_check_interval,
        "failover_check_interval_seconds": settings.failover_check_interval,
        "unknown_task_grace_seconds": settings.unknown_task_grace,
    }
    if overrides.pop("reconcile", True) is False:
        values["reconcile"] = None
    values.update({k: v for k, v in overrides.items() if v is not None})
    return WorkerOptions(**values)  # type: ignore[arg-type]


def build_locks(settings: Settings, parts: Parts) -> Locks:
    """``app.lock``'s implementation: the ledger's table, or Redis keys with the ledger's
    fencing counter (``LOCKS_BACKEND=redis``, which needs ``REDIS_URL``)."""
    ledger = SqlLocks(parts.store.engine)
    manager = redis_lock_manager(settings, parts, ledger)
    return Locks(ledger if manager is None else manager, ledger)


def redis_lock_manager(
    settings: Settings, parts: Parts, ledger: SqlLocks
) -> RedisLockManager | None:
    """The Redis lock manager of ``LOCKS_BACKEND=redis`` on the client of ``parts``' pool
    (``ledger`` issues its fencing tokens), or None with the database backend, whose rows
    are the locks."""
    if settings.locks_backend == "database":
        return None
    if parts.redis is None:
        raise errors.ConfigError("LEDGERQ_LOCKS_BACKEND=redis needs LEDGERQ_REDIS_URL")
    from ledgerq.transport.redis_locks import RedisLockManager

    return RedisLockManager(
        parts.redis.url, namespace=settings.namespace, counter=ledger, client=parts.redis.client()
    )


def build_scheduler(
    settings: Settings,
    parts: Parts,
    registry: TaskRegistry,
    options: SchedulerOptions,
    *,
    instance_id: str,
    on_fired: Callable[[str], None] | None = None,
) -> Scheduler:
    """A scheduler on the ledger of ``parts`` whose jobs are announced on the producer
    transport of ``settings``; ``instance_id`` is recorded as each run's ``executed_by``."""
    # Imported here: only a process that runs the scheduler needs it (and croniter).
    from ledgerq.runtime.scheduler import Scheduler, job_for

    return Scheduler(
        SqlScheduleStore(parts.store),
        producer_transport(settings, parts),
        lambda schedule: job_for(registry, schedule),
        instance_id,
        options,
        on_fired,
    )


def schedule_store(parts: Parts) -> SqlScheduleStore:
    """The schedules of the ledger of ``parts`` (for ``ledgerq schedule``)."""
    return SqlScheduleStore(parts.store)
