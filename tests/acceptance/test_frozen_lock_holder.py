"""A real lock-holding process frozen (SIGSTOP) past its TTL loses the lock: a new holder gets
a higher token, and once thawed the old holder can neither renew nor write under the lock.
On SQLite, PostgreSQL and MariaDB, with the database and the Redis lock implementations."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.runtime.lock_handles import HeldLock
from tests.acceptance.conftest import REPO_ROOT
from tests.contract.test_locks import business, fenced_writes
from tests.helpers import wait_until

#: Every database with the database locks; Redis locks (whose token counter is the same SQL
#: code, covered on every database by the contract suite) on PostgreSQL.
CASES = [("sqlite", "database"), ("postgresql", "database"), ("mysql", "database")]
CASES.append(("postgresql", "redis"))


@pytest.fixture
def holder_app(
    request: pytest.FixtureRequest, make_database_url: Callable[[str], str]
) -> Iterator[tuple[LedgerQ, list[str]]]:
    """The test's own app and the holder process's arguments, for one (database, locks)."""
    database, locks_backend = request.param
    database_url = make_database_url(database)
    args = [database_url, locks_backend]
    options: dict[str, Any] = {}
    if locks_backend == "redis":
        server = request.getfixturevalue("redis_server")
        options = {"redis_url": server.url, "namespace": f"frozen-{secrets.token_hex(4)}"}
        args += [options["redis_url"], options["namespace"]]
    app = LedgerQ(database_url=database_url, locks_backend=locks_backend, **options)
    business.create_all(app.parts.store.engine)
    yield app, args
    app.close()


@pytest.mark.parametrize("holder_app", CASES, indirect=True, ids=["-".join(c) for c in CASES])
def test_a_frozen_holder_loses_the_lock_and_its_late_write_is_refused(
    holder_app: tuple[LedgerQ, list[str]],
) -> None:
    app, args = holder_app
    with subprocess.Popen(
        [sys.executable, "-m", "tests.acceptance.lock_holder", *args],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            check_frozen_holder(app, proc)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()


def check_frozen_holder(app: LedgerQ, proc: subprocess.Popen[str]) -> None:
    """Freeze the holder, let a successor take the lock, thaw the holder and check it is
    refused; then the successor's guarded write is the only one."""
    assert proc.stdin is not None and proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "token", first
    old_token = int(first[1])
    os.kill(proc.pid, signal.SIGSTOP)  # frozen: it cannot renew

    def take() -> HeldLock | None:
        return app.locks.acquire("frozen", ttl=60, owner="successor")

    successor = wait_until(take, timeout=15, what="the lock passes to a successor")
    assert successor is not None and successor.token > old_token

    os.kill(proc.pid, signal.SIGCONT)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "renew: lost"
    assert proc.stdout.readline().strip() == "write: refused"
    assert proc.wait(timeout=30) == 0

    with app.parts.store.engine.begin() as conn:
        successor.guard(conn)
        conn.execute(sa.insert(fenced_writes).values(writer="successor", token=successor.token))
        rows = conn.execute(sa.select(fenced_writes.c.writer, fenced_writes.c.token)).all()
    assert [(r.writer, r.token) for r in rows] == [("successor", successor.token)]
