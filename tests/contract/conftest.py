"""The registry of every implementation of each port, and the fixtures that run a contract
module once per implementation (see README.md in this folder).

Store ports run on every database of ``tests.conftest.POOLED_BACKENDS`` through the
``backend`` fixture below (PostgreSQL directly and through PgBouncer in transaction pooling
mode); the other ports have their registry here. A new database or backend is one entry:
a name and a factory that builds the implementation for one test, isolated like the rest
(a schema or database of its own, a private redis-server, a fresh queue or namespace).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import pytest
import sqlalchemy as sa

from ledgerq.app.operations_surface import RegistryFleetView
from ledgerq.core import fleet, limits
from ledgerq.core.job import NewJob
from ledgerq.core.locks import LockManager
from ledgerq.core.operations import EventSink, FleetView, ProbeResult
from ledgerq.core.ports import ControlChannel, RateLimitBackend, Transport, Waker, WorkflowSignal
from ledgerq.metrics.prometheus import MetricsHub
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.limit_store import SqlLimitStore
from ledgerq.store.lock_store import SqlLocks
from ledgerq.store.postgres.listener import PgNotifyWaker
from ledgerq.store.queues import SqlQueueControls
from ledgerq.transport.polling import PollingTransport
from ledgerq.transport.probe import RedisPingProbe
from ledgerq.transport.redis import RedisTransport
from ledgerq.transport.redis_limits import RedisRateLimiter
from ledgerq.transport.redis_locks import RedisLockManager
from tests.conftest import POOLED_BACKENDS, engine_for
from tests.helpers import wait_until
from tests.redis_server import RedisServer, free_port

Request = pytest.FixtureRequest


@pytest.fixture(params=POOLED_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each database in turn, and PostgreSQL through PgBouncer (``pgbouncer``)."""
    return str(request.param)


def _redis(request: Request) -> RedisServer:
    server: RedisServer = request.getfixturevalue("redis_server")
    return server


def _engine(request: Request, backend: str) -> sa.Engine:
    """A fresh migrated ledger of ``backend``, disposed of after the test."""
    made = engine_for(request.getfixturevalue("make_database_url")(backend))
    request.addfinalizer(made.dispose)
    return made


def _namespace() -> str:
    return f"contract-{secrets.token_hex(4)}"


# -- Transport ------------------------------------------------------------------------------


def _polling_woken(request: Request) -> Transport:
    """The ``dbpoll`` driver on PostgreSQL: polling, woken by LISTEN/NOTIFY."""
    engine = _engine(request, "postgresql")
    return PollingTransport(PgNotifyWaker(engine, {f"wake-{secrets.token_hex(4)}"}))


def _polling_pooled(request: Request) -> Transport:
    """The ``dbpoll`` driver through PgBouncer: woken by LISTEN over the direct URL."""
    engine = _engine(request, "pgbouncer")
    waker = SqlJobStore(engine).dialect.waker({f"wake-{secrets.token_hex(4)}"}, lazy=False)
    assert waker is not None, "a pooled ledger with a direct URL listens"
    return PollingTransport(waker)


def _redis_with_fallback(request: Request) -> Transport:
    """The ``redis`` driver as workers run it: polling the database while Redis is away."""
    return RedisTransport(_redis(request).url, namespace=_namespace(), fallback=PollingTransport())


TRANSPORTS: dict[str, Callable[[Request], Transport]] = {
    "polling": lambda request: PollingTransport(),
    "polling-pg-notify": _polling_woken,
    "polling-pgbouncer-notify": _polling_pooled,
    "redis": lambda request: RedisTransport(_redis(request).url, namespace=_namespace()),
    "redis-with-fallback": _redis_with_fallback,
}


@pytest.fixture(params=sorted(TRANSPORTS))
def transport(request: Request) -> Iterator[Transport]:
    """Each Transport in turn."""
    made = TRANSPORTS[request.param](request)
    yield made
    made.close()


# -- fast lanes: ControlChannel and WorkflowSignal ------------------------------------------


class PubSub(ControlChannel, WorkflowSignal, Protocol):
    """Both fast lanes, as the Redis transport carries them."""


@dataclass(frozen=True, slots=True)
class Lane:
    """A pub/sub lane under test: two ends of it (``publisher`` and ``subscriber``, as two
    processes would hold) and ``outage``, which makes its server unreachable."""

    publisher: PubSub
    subscriber: PubSub
    outage: Callable[[], None]


def _redis_lane(request: Request) -> Lane:
    server = _redis(request)
    namespace = _namespace()
    ends = [RedisTransport(server.url, namespace=namespace) for _ in range(2)]
    for end in ends:
        request.addfinalizer(end.close)
    return Lane(ends[0], ends[1], server.kill)


class Inbox:
    """What a subscriber's handler received, with the thread each call came from."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.threads: set[threading.Thread] = set()

    def handler(self, *args: object) -> None:
        """The subscriber's handler: records ``args``."""
        self.threads.add(threading.current_thread())
        self.calls.append(args)

    def deliver(self, publish: Callable[[], None], expected: tuple[object, ...]) -> None:
        """Publish until ``expected`` arrives: a subscription starts in the background, so
        the first messages may go out before it listens (fast lanes promise no delivery)."""

        def arrived() -> bool:
            publish()
            time.sleep(0.05)
            return expected in self.calls

        wait_until(arrived, timeout=10, what=f"{expected} delivered")


#: Implementations of ControlChannel (stop wake-ups). Polling has none: stops are read from
#: the database on the worker's heartbeat.
CONTROL_CHANNELS: dict[str, Callable[[Request], Lane]] = {"redis": _redis_lane}

#: Implementations of WorkflowSignal. Without one, feed readers poll the event table.
WORKFLOW_SIGNALS: dict[str, Callable[[Request], Lane]] = {"redis": _redis_lane}


@pytest.fixture(params=sorted(CONTROL_CHANNELS))
def control_lane(request: Request) -> Lane:
    """Each ControlChannel in turn."""
    return CONTROL_CHANNELS[request.param](request)


@pytest.fixture(params=sorted(WORKFLOW_SIGNALS))
def signal_lane(request: Request) -> Lane:
    """Each WorkflowSignal in turn."""
    return WORKFLOW_SIGNALS[request.param](request)


# -- Waker ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wakeable:
    """A Waker listening for ``queue``, and ``enqueue(queue)``, which commits a job there."""

    waker: Waker
    queue: str
    enqueue: Callable[[str], None]


def _pg_notify(backend: str) -> Callable[[Request], Wakeable]:
    """LISTEN/NOTIFY as ``backend``'s driver sets it up (through PgBouncer: NOTIFY passes
    through the pooler, LISTEN goes over the direct URL)."""

    def make(request: Request) -> Wakeable:
        store = SqlJobStore(_engine(request, backend))
        # The tests' ledgers share one PostgreSQL database and so its NOTIFYs: a queue of
        # its own.
        queue = f"wake-{secrets.token_hex(4)}"
        waker = store.dialect.waker({queue}, lazy=False)
        assert waker is not None
        request.addfinalizer(waker.close)

        def enqueue(name: str) -> None:
            store.insert_jobs([new_job(name)])

        return Wakeable(waker, queue, enqueue)

    return make


def new_job(queue: str) -> NewJob:
    """A job of task ``t`` with no arguments."""
    return NewJob(task="t", queue=queue, args_json='{"args":[],"kwargs":{}}')


#: Implementations of Waker. SQLite and MariaDB have none: their fetchers poll.
WAKERS: dict[str, Callable[[Request], Wakeable]] = {
    "postgresql-notify": _pg_notify("postgresql"),
    "pgbouncer-notify": _pg_notify("pgbouncer"),
}


@pytest.fixture(params=sorted(WAKERS))
def wakeable(request: Request) -> Wakeable:
    """Each Waker in turn."""
    return WAKERS[request.param](request)


# -- LockManager ----------------------------------------------------------------------------

#: Implementations of LockManager over the ledger's ``SqlLocks`` (which is also the
#: FencingCounter and the LockGuard of both).
LOCK_MANAGERS: dict[str, Callable[[Request, SqlLocks], LockManager]] = {
    "database": lambda request, ledger: ledger,
    "redis": lambda request, ledger: RedisLockManager(
        _redis(request).url, namespace=_namespace(), counter=ledger
    ),
}


@pytest.fixture(params=sorted(LOCK_MANAGERS))
def lock_manager(request: Request, engine: sa.Engine) -> Iterator[LockManager]:
    """Each LockManager in turn, on the current database."""
    made = LOCK_MANAGERS[request.param](request, SqlLocks(engine))
    yield made
    made.close()


# -- RateLimitBackend -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RateBackends:
    """Two clients of one rate-limit backend (two processes sharing the limits) and the
    rate its contention test hammers (a rate the backend keeps up with on this machine)."""

    first: RateLimitBackend
    second: RateLimitBackend
    hot_rate: limits.Rate


def _sql_rates(backend: str) -> Callable[[Request], RateBackends]:
    def make(request: Request) -> RateBackends:
        url = request.getfixturevalue("make_database_url")(backend)
        engines = [engine_for(url), engine_for(url)]
        for made in engines:
            request.addfinalizer(made.dispose)
        first, second = (SqlLimitStore(e) for e in engines)
        return RateBackends(first, second, limits.Rate(5, 0.5))

    return make


def _redis_rates(request: Request) -> RateBackends:
    url, namespace = _redis(request).url, _namespace()
    first, second = (RedisRateLimiter(url, namespace=namespace) for _ in range(2))
    request.addfinalizer(first.close)
    request.addfinalizer(second.close)
    return RateBackends(first, second, limits.Rate(50, 0.5))


RATE_BACKENDS: dict[str, Callable[[Request], RateBackends]] = {
    **{backend: _sql_rates(backend) for backend in POOLED_BACKENDS},
    "redis": _redis_rates,
}


@pytest.fixture(params=sorted(RATE_BACKENDS))
def rate_backends(request: Request) -> RateBackends:
    """Each RateLimitBackend in turn, as two clients."""
    return RATE_BACKENDS[request.param](request)


# -- operations: FleetView, HealthProbe, EventSink ------------------------------------------


@dataclass(frozen=True, slots=True)
class Fleet:
    """A FleetView, and ``see(worker_id, running_jobs)``, which makes a worker known now."""

    view: FleetView
    see: Callable[[str, int], None]


def _jobs_fleet(engine: sa.Engine) -> Fleet:
    store = SqlJobStore(engine)

    def see(worker_id: str, running_jobs: int) -> None:
        store.insert_jobs([new_job("q")] * running_jobs)
        store.claim_jobs(queues=["q"], worker_id=worker_id, limit=running_jobs, lease_seconds=60)

    return Fleet(SqlQueueControls(engine), see)


def _registry_fleet(engine: sa.Engine) -> Fleet:
    admin = SqlFleetAdmin(engine)

    def see(worker_id: str, running_jobs: int) -> None:
        admin.register_worker(fleet.Registration(worker_id, "h", 1, ("q",), 4, "1"))
        admin.heartbeat_worker(worker_id, fleet.Pulse(running_jobs, 0, None))

    return Fleet(RegistryFleetView(admin), see)


#: Implementations of FleetView: derived from running jobs, or the worker registry.
FLEET_VIEWS: dict[str, Callable[[sa.Engine], Fleet]] = {
    "jobs": _jobs_fleet,
    "registry": _registry_fleet,
}


@pytest.fixture(params=sorted(FLEET_VIEWS))
def fleet_view(request: Request, engine: sa.Engine) -> Fleet:
    """Each FleetView in turn, on the current database."""
    return FLEET_VIEWS[request.param](engine)


@dataclass(frozen=True, slots=True)
class Probes:
    """One health check of a dependency that answers, and one of a dependency that does not."""

    up: Callable[[], ProbeResult]
    down: Callable[[], ProbeResult]


def _database_probes(backend: str, unreachable: str) -> Callable[[Request], Probes]:
    def make(request: Request) -> Probes:
        dead = engine_for(unreachable)
        request.addfinalizer(dead.dispose)
        up = SqlQueueControls(_engine(request, backend)).check_database
        return Probes(up, SqlQueueControls(dead).check_database)

    return make


def _redis_probes(request: Request) -> Probes:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    return Probes(RedisPingProbe(_redis(request).url).check, RedisPingProbe(dead).check)


#: Implementations of HealthProbe's check (the database one is ``check_database``).
HEALTH_PROBES: dict[str, Callable[[Request], Probes]] = {
    "sqlite": _database_probes("sqlite", "sqlite:////nonexistent/ledger.db"),
    "postgresql": _database_probes("postgresql", "postgresql://nobody@127.0.0.1:1/none"),
    "pgbouncer": _database_probes("pgbouncer", "postgresql://nobody@127.0.0.1:1/none"),
    "mysql": _database_probes("mysql", "mariadb://root@127.0.0.1:1/none"),
    "redis": _redis_probes,
}


@pytest.fixture(params=sorted(HEALTH_PROBES))
def probes(request: Request) -> Probes:
    """Each HealthProbe in turn."""
    return HEALTH_PROBES[request.param](request)


#: Implementations of EventSink.
EVENT_SINKS: dict[str, Callable[[], EventSink]] = {"prometheus": lambda: MetricsHub().sink}


@pytest.fixture(params=sorted(EVENT_SINKS))
def event_sink(request: Request) -> EventSink:
    """Each EventSink in turn."""
    return EVENT_SINKS[request.param]()


# -- store ports ----------------------------------------------------------------------------


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    """An engine on a fresh ledger of the current database (``backend``)."""
    made = engine_for(database_url)
    yield made
    made.dispose()
