"""A lock holder process for the frozen-holder test: takes a lock, reports its token, then on
"go" (sent after it was frozen and thawed) tries to renew and to write under the lock.

Usage: python -m tests.acceptance.lock_holder DATABASE_URL BACKEND [REDIS_URL] [NAMESPACE]
"""

from __future__ import annotations

import sys
from typing import Any

import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.core import errors
from tests.contract.test_locks import fenced_writes


def main(argv: list[str]) -> int:
    """Hold lock ``frozen`` with a 1 s TTL; print ``token N``, then ``renew: ...`` and
    ``write: ...`` once a line arrives on stdin."""
    database_url, backend, *redis = argv
    options: dict[str, Any] = {"redis_url": redis[0], "namespace": redis[1]} if redis else {}
    app = LedgerQ(database_url=database_url, locks_backend=backend, **options)
    held = app.locks.acquire("frozen", ttl=1.0, owner="frozen-holder")
    assert held is not None
    print(f"token {held.token}", flush=True)
    sys.stdin.readline()
    try:
        held.renew()
        print("renew: ok", flush=True)
    except errors.LeaseLost:
        print("renew: lost", flush=True)
    engine = app.parts.store.engine
    try:
        with engine.begin() as conn:
            held.guard(conn)
            conn.execute(sa.insert(fenced_writes).values(writer="frozen", token=held.token))
        print("write: ok", flush=True)
    except errors.LeaseLost:
        print("write: refused", flush=True)
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
