"""The composition of the operations surface: queue controls, readiness probes and metrics
built from Settings, for ``ledgerq serve`` and ``worker start --health-port``. Like
``bootstrap``, this is where implementations are chosen; the HTTP layer only sees ports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import SecretStr

from ledgerq.app.wiring import Parts, producer_client, redis_lock_manager
from ledgerq.config.settings import Settings
from ledgerq.core import errors
from ledgerq.core.fleet import WorkerState
from ledgerq.core.locks import LockRecord
from ledgerq.core.operations import (
    EventSink,
    FleetView,
    HealthProbe,
    PoolUse,
    ProbeResult,
    WorkerView,
)
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskRegistry
from ledgerq.metrics.prometheus import LedgerReadings, MetricsHub
from ledgerq.producer.client import Client
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.lock_admin import SqlLockAdmin
from ledgerq.store.lock_store import SqlLocks
from ledgerq.store.queues import SqlQueueControls, pool_use
from ledgerq.store.request_ledger import SqlRequestLedger
from ledgerq.transport.polling import PollingTransport


class _Probe:
    """A HealthProbe from a name and a check function."""

    def __init__(self, name: str, check: Callable[[], ProbeResult]) -> None:
        self.name = name
        self._check = check

    def check(self) -> ProbeResult:
        return self._check()


def _migrations_probe(parts: Parts) -> ProbeResult:
    try:
        status = parts.migration_status()
    except errors.StoreError as exc:
        return ProbeResult("migrations", False, str(exc)[:200])
    if status.up_to_date:
        return ProbeResult("migrations", True, f"at {status.current}")
    return ProbeResult(
        "migrations", False, f"at {status.current}, newest {status.head}: run ledgerq db migrate"
    )


def _queued_per_queue(parts: Parts) -> dict[str, int]:
    counts = parts.store.count_jobs()
    return {queue: counts.get((queue, JobState.QUEUED), 0) for queue, _ in counts}


class RegistryFleetView:
    """The FleetView of the worker registry (``queue_workers``): active workers, and the
    stopped and dead ones when asked."""

    def __init__(self, admin: SqlFleetAdmin) -> None:
        self._admin = admin

    #: The stopped and dead workers listed at most (the most recently seen): their rows stay
    #: until ``worker cleanup-crashed``, and a fleet that recycles processes leaves many.
    INACTIVE_LISTED = 50

    def list_workers(self, *, include_inactive: bool = False) -> list[WorkerView]:
        """Active workers most recently seen first, then (``include_inactive``) the
        ``INACTIVE_LISTED`` most recently seen stopped and dead ones."""
        records = sorted(
            self._admin.list_workers(include_inactive=include_inactive),
            key=lambda r: (r.state is not WorkerState.ACTIVE, r.heartbeat_age_seconds),
        )
        active = sum(1 for r in records if r.state is WorkerState.ACTIVE)
        records = records[: active + self.INACTIVE_LISTED]
        return [
            WorkerView(
                worker_id=r.worker_id,
                running_jobs=r.jobs_in_flight if r.state is WorkerState.ACTIVE else 0,
                last_heartbeat_at=r.heartbeat_at,
                queues=r.queues,
                status=str(getattr(r.state, "value", r.state)),
                source="registry",
                hostname=r.hostname,
                stopped_at=r.stopped_at,
            )
            for r in records
        ]


@dataclass
class Operations:
    """Everything the admin surface needs besides the Client."""

    controls: SqlQueueControls
    metrics: MetricsHub
    fleet: FleetView
    probes: list[HealthProbe] = field(default_factory=list)


def queue_controls(parts: Parts) -> SqlQueueControls:
    """Pause and resume queues on the ledger of ``parts``."""
    return SqlQueueControls(parts.store.engine)


def request_ledger(parts: Parts) -> SqlRequestLedger:
    """Idempotency-Key records written with their jobs (bulk enqueue over HTTP)."""
    return SqlRequestLedger(parts.store.engine)


def lock_admin(parts: Parts) -> SqlLockAdmin:
    """List and clear the fleet's distributed locks on the ledger of ``parts``."""
    return SqlLockAdmin(parts.store.engine)


@dataclass(frozen=True)
class ClearedLocks:
    """What ``clear_stale_locks`` did: the records it freed, and the Redis keys it deleted."""

    records: list[LockRecord]
    keys_deleted: int


def clear_stale_locks(settings: Settings, parts: Parts) -> ClearedLocks:
    """Free every stale lock (``queue clear-stale-locks``); with ``LOCKS_BACKEND=redis`` also
    delete their keys, each only while it still holds that holder's value.

    Keys go first: if Redis does not answer (``TransportError``), nothing is cleared and a
    second run still finds the records. A lock re-taken in between has a new token, which the
    ledger's clearing leaves alone.
    """
    admin = lock_admin(parts)
    keys_deleted = 0
    manager = redis_lock_manager(settings, parts, SqlLocks(parts.store.engine))
    if manager is not None:
        try:
            keys_deleted = manager.delete_stale_keys(r for r in admin.list_locks() if r.stale)
        finally:
            manager.close()
    return ClearedLocks(admin.clear_stale_locks(), keys_deleted)


def build_operations(settings: Settings, parts: Parts, *, ledger_gauges: bool = True) -> Operations:
    """Queue controls on the ledger's engine, the readiness probes of ``settings`` (database,
    migrations, Redis when configured) and this process's metrics. ``ledger_gauges`` adds the
    gauges read from the database at scrape time (queue length, latency, pool use)."""
    controls = queue_controls(parts)
    fleet = RegistryFleetView(parts.fleet)
    probes: list[HealthProbe] = [
        _Probe("database", controls.check_database),
        _Probe("migrations", lambda: _migrations_probe(parts)),
    ]
    redis_probe: HealthProbe | None = None
    if settings.redis_url is not None:
        from ledgerq.transport.probe import RedisPingProbe

        redis_probe = RedisPingProbe(settings.redis_url.get_secret_value())
        probes.append(redis_probe)

    def redis_down() -> bool:
        # Workers on the auto driver poll the database while Redis does not answer.
        return redis_probe is not None and not redis_probe.check().ok

    hub = MetricsHub()
    if ledger_gauges:
        hub.read_ledger(
            LedgerReadings(
                queue_lengths=lambda: _queued_per_queue(parts),
                queue_latency=controls.queue_latency_seconds,
                workers=fleet.list_workers,
                transport_fallback=redis_down,
                failover_events=parts.fleet.count_failover_events,
                locks_held=lock_admin(parts).count_held_locks,
            )
        )
        hub.watch_pool(pool_reading(parts))
        hub.watch_breakers(parts.limits.list_breakers)
        hub.watch_coordination(parts.workflows.count_by_state, parts.batches.count_open)
    return Operations(controls=controls, metrics=hub, fleet=fleet, probes=probes)


def pool_reading(parts: Parts) -> Callable[[], PoolUse]:
    """Reads the connection pool of the ledger's engine (for ``MetricsHub.watch_pool``)."""
    engine = parts.store.engine
    dialect = parts.store.dialect
    return lambda: pool_use(engine, kept=dialect.kept_connections())


def build_client(
    settings: Settings, parts: Parts, registry: TaskRegistry, events: EventSink | None
) -> Client:
    """A producer Client whose enqueues are counted by ``events``."""
    return producer_client(settings, parts, registry, events=events)


@dataclass(frozen=True)
class ReadSide:
    """Listings and counts on the read replica (``DATABASE_READ_URL``): a Client for its list
    and count reads (its transport sends nothing), queue controls for paused flags, latency
    and history, and the worker registry. Never used to claim or write."""

    client: Client
    controls: SqlQueueControls
    fleet: FleetView


def read_side(parts: Parts, registry: TaskRegistry) -> ReadSide | None:
    """The read side on ``parts``' replica; None without ``DATABASE_READ_URL``."""
    replica = parts.replica
    if replica is None:
        return None
    client = Client(replica, PollingTransport(), registry, parts.codec)
    fleet = RegistryFleetView(SqlFleetAdmin(replica.engine))
    return ReadSide(client=client, controls=SqlQueueControls(replica.engine), fleet=fleet)


def split_tokens(secret: SecretStr | None) -> list[str]:
    """The comma-separated tokens of a secret setting (several allow rotation)."""
    if secret is None:
        return []
    return [t.strip() for t in secret.get_secret_value().split(",") if t.strip()]
