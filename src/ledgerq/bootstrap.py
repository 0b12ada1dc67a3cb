"""The composition root: turns Settings into the concrete store, transport and worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledgerq.config import Settings
from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.ports import Transport, Waker
from ledgerq.core.tasks import TaskRegistry
from ledgerq.runtime.worker import Worker, WorkerOptions
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from ledgerq.transport.polling import PollingTransport

if TYPE_CHECKING:
    from ledgerq.store.migrate import MigrationStatus


@dataclass
class Parts:
    """What one process needs to produce and run jobs."""

    store: SqlJobStore
    codec: PayloadCodec
    fleet: SqlFleetAdmin

    def migrate(self) -> MigrationStatus:
        """Bring the ledger's tables to the newest revision."""
        from ledgerq.store import migrate  # Alembic costs ~0.3 s of import; workers skip it

        return migrate.migrate(self.store.engine)

    def migration_status(self) -> MigrationStatus:
        """Where the ledger's tables stand."""
        from ledgerq.store import migrate

        return migrate.status(self.store.engine)

    def close(self) -> None:
        """Release every pooled connection."""
        self.store.dispose()


def build_parts(settings: Settings) -> Parts:
    """Create the store and codec of ``settings`` (the engine connects lazily)."""
    url = settings.database_url.get_secret_value()
    engine = create_engine(url, pool_size=settings.db_pool_size)
    relaxed = None
    if engine.dialect.name == "postgresql":
        relaxed = create_engine(url, pool_size=2, relaxed=True)
    store = SqlJobStore(engine, relaxed)
    return Parts(
        store=store,
        codec=PayloadCodec(max_bytes=settings.max_payload_bytes),
        fleet=SqlFleetAdmin(engine),
    )


def build_transport(settings: Settings, parts: Parts, queues: tuple[str, ...]) -> Transport:
    """The worker's transport: polling, woken by LISTEN/NOTIFY on PostgreSQL."""
    if settings.redis_url is not None:
        raise errors.ConfigError("the redis driver is not available yet; unset LEDGERQ_REDIS_URL")
    waker: Waker | None = None
    if parts.store.dialect.name == "postgresql":
        from ledgerq.store.listener import PgNotifyWaker

        waker = PgNotifyWaker(parts.store.engine, set(queues))
    return PollingTransport(waker)


def producer_transport() -> Transport:
    """The producer's transport: with dbpoll there is nothing to send."""
    return PollingTransport()


def build_worker(
    settings: Settings, parts: Parts, registry: TaskRegistry, options: WorkerOptions
) -> Worker:
    """A worker wired to the store and transport of ``settings``."""
    transport = build_transport(settings, parts, options.queues)
    return Worker(
        store=parts.store,
        transport=transport,
        registry=registry,
        codec=parts.codec,
        options=options,
        fleet_store=parts.fleet,
    )


def worker_options(settings: Settings, **overrides: object) -> WorkerOptions:
    """WorkerOptions from settings, with explicit (non-None) overrides winning."""
    values: dict[str, object] = {
        "queues": settings.queues,
        "concurrency": settings.concurrency,
        "batch_size": settings.batch_size,
        "prefetch": settings.prefetch,
        "poll_interval_seconds": settings.poll_interval,
        "heartbeat_interval_seconds": settings.heartbeat_interval,
        "lease_seconds": settings.worker_ttl,
        "shutdown_grace_seconds": settings.shutdown_grace,
        "health_check_interval_seconds": settings.worker_health_check_interval,
        "failover_check_interval_seconds": settings.failover_check_interval,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values["prefetch"] is None:
        values["prefetch"] = values["concurrency"]
    return WorkerOptions(**values)  # type: ignore[arg-type]
