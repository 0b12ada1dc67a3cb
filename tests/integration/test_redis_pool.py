"""One application, one Redis connection pool: every Redis user the composition root builds
(producer, worker transport, workflow announcer and event signal, rate limiter, lock manager,
control lane) borrows the client of ``Parts``' pool, and ``app.close()`` disconnects it.

Each test names its connections through the URL (``?client_name=``), so ``CLIENT LIST`` on the
test's private redis-server shows exactly the application's connections."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from ledgerq import JobContext, LedgerQ
from ledgerq.app import wiring
from ledgerq.store.lock_store import SqlLocks
from ledgerq.transport.redis import RedisTransport
from ledgerq.transport.redis_pool import RedisPool
from tests.helpers import wait_until
from tests.redis_server import RedisServer


@pytest.fixture
def client_name() -> str:
    """A connection name no other test uses."""
    return f"lq-pool-{secrets.token_hex(4)}"


@pytest.fixture
def named_url(redis_server: RedisServer, client_name: str) -> str:
    """The private server's URL; every connection made from it is named ``client_name``."""
    return f"{redis_server.url}?client_name={client_name}"


@pytest.fixture
def pools_made(monkeypatch: pytest.MonkeyPatch, client_name: str) -> list[object]:
    """Every redis-py ConnectionPool created for ``client_name`` from now on."""
    made: list[object] = []
    original: Callable[..., None] = redis.ConnectionPool.__init__

    def counting(self: redis.ConnectionPool, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if kwargs.get("client_name") == client_name:
            made.append(self)

    monkeypatch.setattr(redis.ConnectionPool, "__init__", counting)
    return made


def named_connections(server: RedisServer, name: str) -> list[dict[str, Any]]:
    """The server's connections named ``name`` (the caller's own is unnamed)."""
    with server.client() as raw:
        return [c for c in raw.client_list() if c.get("name") == name]


@pytest.fixture
def app(make_database_url: Callable[[str], str], named_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(
        database_url=make_database_url("sqlite"),
        redis_url=named_url,
        namespace=f"pool-{secrets.token_hex(4)}",
        locks_backend="redis",
    )
    yield application
    application.close()


def test_an_application_opens_one_redis_pool_and_close_disconnects_it(
    app: LedgerQ, redis_server: RedisServer, client_name: str, pools_made: list[object]
) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(name="work", rate_limit="1000/s")
    def work(ctx: JobContext, n: int) -> None:
        with lock:
            ran.append(n)

    app.client.enqueue([app.client.build("work", (n,)) for n in range(5)])
    app.worker(burst=True, concurrency=2, reconcile=False).run()
    assert sorted(ran) == list(range(5))
    with app.lock("pool-test", ttl=5) as held:
        assert held.token > 0
    assert app.rate_limiter("login", "5/m").try_acquire(key="someone").allowed
    feed = app.workflow_events(poll_interval=0.05)
    wait_until(
        lambda: any("subscribe" in c["cmd"] for c in named_connections(redis_server, client_name)),
        timeout=10,
        what="the event feed subscribed",
    )
    feed.close()

    assert len(pools_made) == 1, f"{len(pools_made)} Redis connection pools for one application"
    assert named_connections(redis_server, client_name)

    app.close()
    wait_until(
        lambda: not named_connections(redis_server, client_name),
        timeout=10,
        what="every Redis connection of the application closed",
    )


def test_the_wiring_lends_every_redis_user_the_same_client(
    app: LedgerQ, pools_made: list[object]
) -> None:
    settings, parts = app.settings, app.parts
    assert parts.redis is not None
    shared = parts.redis.client()
    producer = wiring.producer_transport(settings, parts)
    control = wiring.control_channel(settings, parts)
    signal = wiring.workflow_signal(settings, parts)
    worker_side = wiring.build_transport(settings, parts, ("default",), driver="redis")
    manager = wiring.redis_lock_manager(settings, parts, SqlLocks(parts.store.engine))
    transports = [producer, control, signal, worker_side]
    assert all(isinstance(t, RedisTransport) and t._client is shared for t in transports)
    assert manager is not None and manager._client is shared
    for transport in transports:
        assert transport is not None
        transport.close()
    manager.close()
    # A borrower's close leaves the shared client working.
    assert shared.ping()
    assert len(pools_made) == 1


def test_a_borrowed_client_outlives_its_borrowers_and_the_pool_closes_it(
    redis_server: RedisServer, named_url: str, client_name: str, pools_made: list[object]
) -> None:
    from ledgerq.transport.redis_limits import RedisRateLimiter
    from ledgerq.transport.redis_locks import RedisLockManager

    pool = RedisPool(named_url)
    assert pools_made == []  # nothing is made before first use
    shared = pool.client()
    assert pool.client() is shared
    transport = RedisTransport(named_url, namespace="borrow", client=shared)
    limiter = RedisRateLimiter(named_url, namespace="borrow", client=shared)
    manager = RedisLockManager(named_url, namespace="borrow", counter=None, client=shared)  # type: ignore[arg-type]
    transport.ping()
    for borrower in (transport, limiter, manager):
        borrower.close()
    assert shared.ping()
    assert named_connections(redis_server, client_name)
    pool.close()
    pool.close()  # twice is harmless
    wait_until(
        lambda: not named_connections(redis_server, client_name),
        timeout=10,
        what="the pool's connections closed",
    )
    assert len(pools_made) == 1
