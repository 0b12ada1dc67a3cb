"""The LockManager contract, with the ledger's LockGuard and FencingCounter: one suite over
every LockManager (``LOCK_MANAGERS``: the ``distributed_locks`` table and Redis keys) on every
database."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.locks import LockManager
from ledgerq.runtime.lock_handles import HeldLock, Locks
from ledgerq.store.lock_store import SqlLocks
from ledgerq.transport.redis_locks import RedisLockManager
from tests.helpers import wait_until
from tests.redis_server import RedisServer

business = sa.MetaData()
#: A stand-in for the application's own data, written only under a valid lease.
fenced_writes = sa.Table(
    "fenced_writes",
    business,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("writer", sa.String(64), nullable=False),
    sa.Column("token", sa.Integer, nullable=False),
)


@pytest.fixture(autouse=True)
def business_tables(engine: sa.Engine) -> None:
    business.create_all(engine)


@pytest.fixture
def locks(lock_manager: LockManager, engine: sa.Engine) -> Locks:
    """``Locks`` over each LockManager (see ``LOCK_MANAGERS``), owned by ``tester``."""
    return Locks(lock_manager, SqlLocks(engine), owner="tester")


def guarded_write(engine: sa.Engine, held: HeldLock, writer: str) -> None:
    """Write one row in a transaction fenced by ``held``; raises LeaseLost if refused."""
    with engine.begin() as conn:
        held.guard(conn)
        conn.execute(sa.insert(fenced_writes).values(writer=writer, token=held.token))


def writes(engine: sa.Engine) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(fenced_writes.c.writer, fenced_writes.c.token)).all()
        return [(row.writer, row.token) for row in rows]


def take_over(locks: Locks, name: str, owner: str) -> HeldLock:
    """Wait (with a deadline) until ``owner`` gets lock ``name``."""
    held = wait_until(
        lambda: locks.acquire(name, ttl=30, owner=owner), timeout=10, what=f"{owner} takes {name}"
    )
    assert held is not None
    return held


def test_a_held_lock_excludes_others_and_release_frees_it_with_a_higher_token(
    locks: Locks, engine: sa.Engine
) -> None:
    first = locks.acquire("report", ttl=30)
    assert first is not None and first.token >= 1 and first.owner == "tester"
    assert locks.acquire("report", ttl=30, owner="other") is None
    assert locks.acquire("other-name", ttl=30) is not None  # names are independent
    assert first.release() is True
    assert first.release() is False  # idempotent
    second = locks.acquire("report", ttl=30, owner="other")
    assert second is not None and second.token > first.token and second.owner == "other"
    with pytest.raises(errors.LeaseLost):  # a released lease is refused by the guard
        guarded_write(engine, first, "after-release")
    assert writes(engine) == []


def test_renew_extends_the_lease_and_a_stale_lease_cannot_renew_or_release(
    locks: Locks,
) -> None:
    held = locks.acquire("renewed", ttl=30)
    assert held is not None
    before = held.expires_at
    renewed = held.renew(ttl=120)
    assert renewed.token == held.token and renewed.expires_at > before
    with pytest.raises(errors.InvalidLock):
        held.renew(ttl=-1)

    short = locks.acquire("short", ttl=0.3)
    assert short is not None
    taker = take_over(locks, "short", "taker")
    assert taker.token > short.token
    with pytest.raises(errors.LeaseLost):
        short.renew()
    assert short.release() is False
    assert locks.acquire("short", ttl=30) is None  # the stale release freed nothing


def test_an_expired_holder_loses_the_lock_and_its_guarded_write_is_refused(
    locks: Locks, engine: sa.Engine
) -> None:
    old = locks.acquire("ledger", ttl=0.3, owner="old")
    assert old is not None
    guarded_write(engine, old, "old")  # accepted while current
    # The old holder stops renewing (a frozen thread): the lock expires and passes on.
    new = take_over(locks, "ledger", "new")
    assert new.token > old.token
    with pytest.raises(errors.LeaseLost):
        guarded_write(engine, old, "old-late")
    guarded_write(engine, new, "new")
    assert writes(engine) == [("old", old.token), ("new", new.token)]


def test_waiting_acquire_times_out_and_bad_requests_are_rejected(locks: Locks) -> None:
    assert locks.acquire("busy", ttl=30, owner="holder") is not None
    started = time.monotonic()
    assert locks.acquire("busy", ttl=30, timeout=0.3) is None
    assert time.monotonic() - started >= 0.3
    with pytest.raises(errors.LockUnavailable), locks.hold("busy", ttl=30, timeout=0):
        pytest.fail("the block must not run")
    for name, ttl in (("", 1.0), ("x" * 201, 1.0), ("ok", 0), ("ok", 10**9)):
        with pytest.raises(errors.InvalidLock):
            locks.acquire(name, ttl=ttl)


def test_a_waiter_gets_the_lock_when_the_holder_releases(locks: Locks) -> None:
    holder = locks.acquire("handover", ttl=30, owner="holder")
    assert holder is not None
    threading.Timer(0.2, holder.release).start()
    with locks.hold("handover", ttl=30, timeout=10) as waiter:
        assert waiter.token > holder.token
    assert locks.acquire("handover", ttl=30) is not None  # released at the end of the block


def test_concurrent_contenders_never_overlap_and_tokens_grow(locks: Locks) -> None:
    """Four threads take the lock in turns; at most one is inside at any time and each
    holding's token is higher than the one before it."""
    inside: list[str] = []
    tokens: list[int] = []
    overlaps: list[str] = []
    rounds = 5

    def contend(me: str) -> None:
        for _ in range(rounds):
            with locks.hold("contended", ttl=30, timeout=30, owner=me) as held:
                if inside:
                    overlaps.append(f"{me} with {inside}")
                inside.append(me)
                tokens.append(held.token)
                time.sleep(0.005)  # a critical section with some length, so overlaps show
                inside.remove(me)

    threads = [threading.Thread(target=contend, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert overlaps == []
    assert len(tokens) == 4 * rounds
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_redis_tokens_survive_a_flush_and_the_old_holder_is_fenced(
    engine: sa.Engine, redis_server: RedisServer
) -> None:
    """Redis loses every key: a new holder gets the lock at once, with a higher token from
    the ledger, and the holder that lost its key can neither renew nor write."""
    ledger = SqlLocks(engine)
    manager = RedisLockManager(redis_server.url, namespace="flush", counter=ledger)
    locks = Locks(manager, ledger, owner="tester")
    try:
        old = locks.acquire("flushed", ttl=60, owner="old")
        assert old is not None
        with redis_server.client() as raw:
            raw.flushall()
        new = locks.acquire("flushed", ttl=60, owner="new")
        assert new is not None and new.token > old.token
        with pytest.raises(errors.LeaseLost):
            old.renew()
        with pytest.raises(errors.LeaseLost):
            guarded_write(engine, old, "old")
        assert old.release() is False
        guarded_write(engine, new, "new")
        assert writes(engine) == [("new", new.token)]
    finally:
        manager.close()
