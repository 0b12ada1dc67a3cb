"""SQLite's single enqueue on sqlite3 directly (store/sqlite/fast.py): committed and durable
like the portable insert, under the process's write lock, with clear errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.migrate import migrate
from ledgerq.store.sqlite import write_lock
from ledgerq.store.tables import jobs

ARGS = '{"args":[],"kwargs":{}}'


def new(**kw: Any) -> NewJob:
    return NewJob(task="t", queue="q", args_json=ARGS, **kw)


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    engine = create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(engine)
    yield engine
    engine.dispose()


def statements_of(engine: sa.Engine) -> list[str]:
    seen: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def test_a_single_enqueue_bypasses_sqlalchemy_and_writes_the_portable_row(
    engine: sa.Engine,
) -> None:
    store = SqlJobStore(engine)
    seen = statements_of(engine)
    [fast] = store.insert_jobs([new(priority=3, timeout_seconds=2.5, delay_seconds=30)])
    assert not any("INSERT" in s for s in seen)  # not through SQLAlchemy's execution
    with engine.begin() as conn:  # the portable path, for comparison
        [portable] = store.insert_jobs(
            [new(priority=3, timeout_seconds=2.5, delay_seconds=30)], connection=conn
        )
    assert any("INSERT" in s for s in seen)
    # Committed: a fresh connection of another engine reads both rows.
    other = create_engine(str(engine.url))
    try:
        with other.connect() as conn:
            rows = {
                r.id: r
                for r in conn.execute(
                    sa.select(jobs).where(jobs.c.id.in_([fast.job_id, portable.job_id]))
                )
            }
    finally:
        other.dispose()
    a, b = rows[fast.job_id], rows[portable.job_id]
    for column in ("queue", "task", "args", "priority", "state", "max_attempts", "attempt"):
        assert getattr(a, column) == getattr(b, column), column
    assert (a.timeout_seconds, a.dedupe_key, a.expires_at) == (2.5, None, None)
    # Times from the database clock, in SQLAlchemy's format (read back as datetimes).
    assert 29 <= (a.run_at - a.created_at).total_seconds() <= 31
    assert abs((a.created_at - b.created_at).total_seconds()) < 5


def test_ids_follow_the_input_order(engine: sa.Engine) -> None:
    store = SqlJobStore(engine)
    results = store.insert_jobs([new(priority=p) for p in (5, 1, 9, 0)])
    with engine.connect() as conn:
        found = dict(conn.execute(sa.select(jobs.c.id, jobs.c.priority)).all())
    assert [found[r.job_id] for r in results] == [5, 1, 9, 0]


def test_a_single_enqueue_waits_for_the_write_lock_instead_of_failing(engine: sa.Engine) -> None:
    store = SqlJobStore(engine)
    inserted = threading.Event()
    failed: list[BaseException] = []

    def enqueue() -> None:
        try:
            store.insert_jobs([new()])
            inserted.set()
        except BaseException as exc:
            failed.append(exc)

    with engine.begin() as conn:  # holds the process's write lock and SQLite's
        conn.execute(
            sa.insert(jobs).values(
                queue="q",
                task="t",
                args=ARGS,
                state="queued",
                max_attempts=1,
                run_at=sa.func.now(),
                created_at=sa.func.now(),
            )
        )
        writer = threading.Thread(target=enqueue, daemon=True)
        writer.start()
        assert not inserted.wait(0.3)  # queued behind the open transaction
        assert write_lock.lock_of(engine) is write_lock.lock_of(store.engine)
    writer.join(10)
    assert inserted.is_set() and not failed
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 2


def test_missing_tables_ask_for_a_migration(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(errors.StoreError, match="run `ledgerq db migrate`"):
            SqlJobStore(engine).insert_jobs([new()])
    finally:
        engine.dispose()
