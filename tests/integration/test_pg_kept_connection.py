"""The fast path keeps one pooled connection between its statements (store/postgres/kept.py):
statements in turn check out once, the pool's reading does not count the kept one as in use,
the kept session is closed with the engine, goes back to the pool after ``KEEP_SECONDS``, and a
forked child never uses its parent's session."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.app.operations_surface import pool_reading
from ledgerq.core import errors
from ledgerq.core.job import NewJob
from ledgerq.store import queues
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.postgres import PostgresDriver, kept

PID = sa.text("SELECT pg_backend_pid()")


@pytest.fixture
def store(make_database_url: Callable[[str], str]) -> Iterator[SqlJobStore]:
    engine = create_engine(make_database_url("postgresql"), pool_size=2)
    ledger = SqlJobStore(engine)
    assert isinstance(ledger.dialect, PostgresDriver), "PostgreSQL over psycopg takes the fast path"
    yield ledger
    engine.dispose()


def enqueue(store: SqlJobStore, count: int = 1) -> None:
    store.insert_jobs([NewJob(task="t", queue="q", args_json="[]") for _ in range(count)])


def fast_pid(store: SqlJobStore) -> int:
    """The backend pid of the session the fast path's next durable statement runs on."""
    assert isinstance(store.dialect, PostgresDriver)
    [(pid,)] = store.dialect.fast.rows(PID, {})
    return int(pid)


def checkouts(engine: sa.Engine) -> list[int]:
    """A list that grows by one at each checkout from ``engine``'s pool."""
    seen: list[int] = []
    sa.event.listen(engine, "checkout", lambda *_: seen.append(1))
    return seen


def session_alive(store: SqlJobStore, pid: int) -> bool:
    with store.engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        )
        return bool(found.scalar())


def test_statements_in_turn_run_on_one_kept_session_checked_out_once(store: SqlJobStore) -> None:
    enqueue(store)  # the first statement checks a connection out and keeps it
    seen = checkouts(store.engine)
    pid = fast_pid(store)
    for _ in range(10):
        enqueue(store)
    assert fast_pid(store) == pid
    assert seen == [], "a kept connection is not checked out of the pool again"
    assert store.engine.pool.checkedout() == 1  # the pool's bound still counts it


def test_the_pools_reading_does_not_count_the_kept_connection_as_in_use(
    store: SqlJobStore,
) -> None:
    enqueue(store)
    assert store.dialect.kept_connections() == 1
    use = queues.pool_use(store.engine, kept=store.dialect.kept_connections())
    assert (use.checked_out, use.size) == (0, 2)


def test_a_transaction_meanwhile_takes_another_connection_in_transaction_mode(
    store: SqlJobStore,
) -> None:
    enqueue(store)
    pid = fast_pid(store)
    with store.engine.connect() as conn:
        assert conn.execute(PID).scalar() != pid
        conn.execute(sa.text("CREATE TEMP TABLE scratch (x int)"))
        conn.rollback()  # in transaction mode: the table goes with the rollback
        assert conn.execute(sa.text("SELECT to_regclass('scratch')")).scalar() is None


def test_disposing_the_engine_closes_the_kept_session(store: SqlJobStore) -> None:
    enqueue(store)
    pid = fast_pid(store)
    store.engine.dispose()
    assert store.dialect.kept_connections() == 0
    deadline = time.monotonic() + 10
    while session_alive(store, pid):  # the server ends the backend once the socket closes
        assert time.monotonic() < deadline, "the kept session outlived its engine"
        time.sleep(0.05)
    enqueue(store)  # the engine serves again, on a new session
    assert fast_pid(store) != pid


def test_a_connection_kept_past_keep_seconds_goes_back_to_the_pool(
    store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    enqueue(store)
    seen = checkouts(store.engine)
    monkeypatch.setattr(kept, "KEEP_SECONDS", 0.0)
    for _ in range(3):
        time.sleep(0.001)  # older than KEEP_SECONDS when next taken
        enqueue(store)
    assert len(seen) == 3, "each statement took its connection from the pool again"
    assert store.engine.pool.checkedout() == 1


def test_a_connection_in_constant_use_still_goes_back_after_keep_seconds(
    store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kept again after each statement, it must not be kept for ever: the pool's recycling
    # of old sessions would never apply to it.
    monkeypatch.setattr(kept, "KEEP_SECONDS", 0.2)
    enqueue(store)
    seen = checkouts(store.engine)
    deadline = time.monotonic() + 10
    while not seen:
        assert time.monotonic() < deadline, "a connection in constant use was kept for ever"
        enqueue(store)


def test_a_forked_child_does_not_use_or_close_its_parents_kept_session(
    store: SqlJobStore,
) -> None:
    enqueue(store)
    parent_pid = fast_pid(store)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.write(write, str(fast_pid(store)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_session = int(pipe.read() or 0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_session not in (0, parent_pid), "the child ran on its parent's session"
    assert fast_pid(store) == parent_pid, "the parent's kept session still serves it"
    enqueue(store)


def test_a_statement_that_fails_does_not_keep_its_connection(store: SqlJobStore) -> None:
    assert isinstance(store.dialect, PostgresDriver)
    enqueue(store)
    pid = fast_pid(store)
    with pytest.raises(errors.StoreError, match="division by zero"):
        store.dialect.fast.rows(sa.text("SELECT 1 / 0"), {})
    assert store.dialect.kept_connections() == 0
    assert store.engine.pool.checkedout() == 0
    assert fast_pid(store) == pid  # it went back to the pool, and comes from it again


def test_an_applications_pool_reading_leaves_out_the_kept_connection(
    make_database_url: Callable[[str], str],
) -> None:
    """What ``db_connection_pool_active`` reads: an idle producer after an enqueue has no
    connection in use, though its pool counts the kept one as checked out."""
    app = LedgerQ(database_url=make_database_url("postgresql"))
    try:

        @app.task(queue="kept")
        def noop(ctx: JobContext) -> None: ...

        app.migrate()
        noop.enqueue()
        assert app.engine.pool.checkedout() == 1
        assert pool_reading(app.parts)().checked_out == 0
    finally:
        app.close()
