"""The shared parts of one process (``Parts``): the ledger's store and its engines, the codec,
and, with ``REDIS_URL``, one ``RedisPool`` (one redis-py client and connection pool per
application), made once by ``build_parts`` and closed together. The rest of the composition
root (transports, workers, schedulers) is ``wiring.py``, which re-exports these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from ledgerq.config.settings import Settings
from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.ports import FinishSignal, Transport
from ledgerq.core.schema import MigrationStatus
from ledgerq.core.workflow import WorkflowCommit
from ledgerq.store.batch_store import SqlBatchStore
from ledgerq.store.dialects import Pooler
from ledgerq.store.drivers import driver_type
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.item_store import SqlJobItems
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.limit_store import SqlLimitStore
from ledgerq.store.repair import SqlLedgerRepair
from ledgerq.store.workflows import SqlWorkflowStore
from ledgerq.transport.polling import PollingTransport
from ledgerq.transport.redis_pool import RedisPool

if TYPE_CHECKING:
    from ledgerq.transport.redis import RedisTransport

log = structlog.get_logger("ledgerq.app.wiring")


@dataclass
class Parts:
    """What one process needs to produce and run jobs."""

    store: SqlJobStore
    codec: PayloadCodec
    fleet: SqlFleetAdmin
    repair: SqlLedgerRepair = field(init=False)
    limits: SqlLimitStore = field(init=False)
    items: SqlJobItems = field(init=False)
    batches: SqlBatchStore = field(init=False)
    workflows: SqlWorkflowStore = field(init=False)
    redis: RedisPool | None = None
    """The application's one Redis client and connection pool (None without ``REDIS_URL``):
    every Redis user built here borrows it, and ``close`` disconnects it."""
    announcer: Transport | None = None
    """Announces jobs that workflow steps queued (Redis), closed with the parts."""
    finished: FinishSignal | None = field(init=False)
    """Wakes ``app.jobs.wait`` (PostgreSQL's LISTEN; None elsewhere), closed with the parts."""
    replica: SqlJobStore | None = None
    """The store on ``DATABASE_READ_URL`` (None when unset), for listings and counts that may
    lag; nothing claims or writes through it. Closed with the parts."""

    def __post_init__(self) -> None:
        self.repair = SqlLedgerRepair(self.store.engine)
        self.limits = SqlLimitStore(self.store.engine, self.store.relaxed_pool)
        self.items = SqlJobItems(self.store.engine)
        self.batches = SqlBatchStore(self.store)
        self.workflows = SqlWorkflowStore(self.store.engine, self.store.announce)
        self.finished = self.store.dialect.finished_signal()

    def migrate(self) -> MigrationStatus:
        """Bring the ledger's tables to the newest revision."""
        from ledgerq.store import migrate  # Alembic costs ~0.3 s of import; workers skip it

        return migrate.migrate(self.store.engine)

    def migration_status(self) -> MigrationStatus:
        """Where the ledger's tables stand."""
        from ledgerq.store import migrate

        return migrate.status(self.store.engine)

    def replica_migration_status(self) -> MigrationStatus | None:
        """Where the read replica's tables stand (None without ``DATABASE_READ_URL``)."""
        if self.replica is None:
            return None
        from ledgerq.store import migrate

        return migrate.status(self.replica.engine)

    @property
    def read_store(self) -> SqlJobStore:
        """The replica's store when ``DATABASE_READ_URL`` is set, else the ledger's: for
        listings and counts only, never for a claim or a write."""
        return self.replica if self.replica is not None else self.store

    def close(self) -> None:
        """Release every pooled connection: the database's, and Redis's after closing the
        Redis users built on the pool (their pub/sub lanes end)."""
        if self.finished is not None:
            self.finished.close()
        self.store.dispose()
        if self.replica is not None:
            self.replica.dispose()
        if self.announcer is not None:
            self.announcer.close()
        if self.redis is not None:
            self.redis.close()


def build_parts(settings: Settings) -> Parts:
    """Create the store and codec of ``settings`` (the engine connects lazily)."""
    url = settings.database_url.get_secret_value()
    pooler = database_pooler(settings)
    engine = create_engine(url, pool_size=settings.db_pool_size, pooler=pooler)
    relaxed = driver_type(engine.dialect.name).relaxed_pool(url, pooler)
    pool = None if settings.redis_url is None else RedisPool(settings.redis_url.get_secret_value())
    announcer = None if pool is None else lend_transport(settings, pool)
    announce = None if announcer is None else _workflow_announcer(announcer)
    return Parts(
        store=SqlJobStore(engine, relaxed, announce=announce),
        codec=PayloadCodec(max_bytes=settings.max_payload_bytes),
        fleet=SqlFleetAdmin(engine),
        redis=pool,
        announcer=announcer,
        replica=_replica(settings),
    )


def database_pooler(settings: Settings) -> Pooler | None:
    """The transaction-pooling proxy ``DATABASE_URL`` goes through (None: direct)."""
    if settings.db_pooler == "none":
        return None
    direct = settings.database_direct_url
    return Pooler(settings.db_pooler, None if direct is None else direct.get_secret_value())


#: ``application_name`` of the read replica's sessions (``pg_stat_activity`` tells them apart).
READ_APPLICATION_NAME = "ledgerq-read"


def _replica(settings: Settings) -> SqlJobStore | None:
    """The store on ``DATABASE_READ_URL``, when set. Its pool is small: it serves an operator's
    pages and commands, never the workers."""
    if settings.database_read_url is None:
        return None
    engine = create_engine(
        settings.database_read_url.get_secret_value(),
        pool_size=min(settings.db_pool_size, 4),
        application_name=READ_APPLICATION_NAME,
    )
    return SqlJobStore(engine)


def _workflow_announcer(transport: RedisTransport) -> Callable[[WorkflowCommit], None]:
    """After a workflow write committed: send the ids of the jobs its steps queued and signal
    its new events. Either may fail harmlessly (the reconciler re-sends, readers poll)."""

    def announce(commit: WorkflowCommit) -> None:
        try:
            if commit.hints:
                transport.push(commit.hints)
            if commit.workflow_ids:
                transport.publish_workflow_events(sorted(commit.workflow_ids))
        except errors.TransportError as exc:
            log.info("could not announce a workflow change", error=str(exc))

    return announce


def lend_transport(
    settings: Settings, pool: RedisPool, fallback: PollingTransport | None = None
) -> RedisTransport:
    """A RedisTransport on the client of ``pool``, closed with the pool."""
    # The one place that imports the redis adapter's transport.
    from ledgerq.transport.redis import RedisTransport

    transport = RedisTransport(
        pool.url, namespace=settings.namespace, fallback=fallback, client=pool.client()
    )
    pool.track(transport)
    return transport
