"""The LockAdmin contract on every database, with locks taken through every LockManager
(``LOCK_MANAGERS``): the ledger records every holding, whichever manager keeps the lock."""

from __future__ import annotations

import sqlalchemy as sa

from ledgerq.core.locks import LockManager
from ledgerq.store.lock_admin import SqlLockAdmin
from tests.helpers import wait_until


def test_holders_are_listed_by_name_until_they_release(
    lock_manager: LockManager, engine: sa.Engine
) -> None:
    admin = SqlLockAdmin(engine)
    second = lock_manager.acquire_lock("b-lock", owner="host:2", ttl_seconds=60)
    first = lock_manager.acquire_lock("a-lock", owner="host:1", ttl_seconds=60)
    assert first is not None and second is not None
    records = admin.list_locks()
    assert [(r.name, r.owner, r.token) for r in records] == [
        ("a-lock", "host:1", first.token),
        ("b-lock", "host:2", second.token),
    ]
    assert not any(r.stale for r in records) and all(r.expires_in_seconds > 0 for r in records)
    assert lock_manager.release_lock(first)
    assert [r.name for r in admin.list_locks()] == ["b-lock"]


def test_clearing_frees_only_stale_locks_and_keeps_their_counters(
    lock_manager: LockManager, engine: sa.Engine
) -> None:
    admin = SqlLockAdmin(engine)
    expired = lock_manager.acquire_lock("expiring", owner="host:1", ttl_seconds=0.3)
    fresh = lock_manager.acquire_lock("fresh", owner="host:2", ttl_seconds=60)
    assert expired is not None and fresh is not None
    wait_until(lambda: any(r.stale for r in admin.list_locks()), what="the lease expires")
    assert [r.name for r in admin.clear_stale_locks()] == ["expiring"]
    assert [r.name for r in admin.list_locks()] == ["fresh"]
    assert admin.clear_stale_locks() == []
    # Redis keeps a lock on its own clock: its key may outlive the ledger's record by the
    # milliseconds between the two writes of the acquire.
    again = wait_until(
        lambda: lock_manager.acquire_lock("expiring", owner="host:3", ttl_seconds=60),
        timeout=5,
        what="the expired lock is free again",
    )
    assert again.token > expired.token
