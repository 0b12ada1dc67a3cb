"""SQLite's single enqueue and group completion on sqlite3 directly (store/sqlite/fast.py):
committed like the portable paths, under the process's write lock, fenced, with clear errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.migrate import migrate
from ledgerq.store.sqlite import write_lock
from ledgerq.store.tables import job_assignments, jobs

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


def test_a_group_completion_bypasses_sqlalchemy_and_stays_fenced(engine: sa.Engine) -> None:
    store = SqlJobStore(engine)
    store.insert_jobs([new(max_attempts=3) for _ in range(3)])
    claimed = store.claim_jobs(queues=["q"], worker_id="w1", limit=3, lease_seconds=30)
    one, two, three = (Claim(j.id, j.attempt) for j in claimed)
    seen = statements_of(engine)
    applied = store.complete_jobs(
        [
            Completion(one, JobState.SUCCEEDED, result_json="7", ran_seconds=0.5),
            Completion(two, JobState.FAILED, error_json='"boom"', retry_delay_seconds=60),
            Completion(Claim(three.job_id, three.attempt + 1), JobState.SUCCEEDED),  # stale
        ]
    )
    assert applied == [True, True, False]
    assert not any("UPDATE" in s or "INSERT" in s for s in seen)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(sa.select(jobs))}
        history = conn.execute(sa.select(job_assignments.c.job_id, job_assignments.c.outcome)).all()
    assert (rows[one.job_id].state, rows[one.job_id].result) == ("succeeded", "7")
    assert rows[one.job_id].finished_at is not None
    assert (rows[one.job_id].finished_at - rows[one.job_id].started_at).total_seconds() >= 0.4
    assert (rows[two.job_id].state, rows[two.job_id].error) == ("failed", '"boom"')
    assert 55 <= (rows[two.job_id].run_at - rows[two.job_id].claimed_at).total_seconds() <= 65
    assert rows[three.job_id].state == "running"  # the stale attempt's outcome was refused
    assert sorted(history) == sorted([(one.job_id, "succeeded"), (two.job_id, "failed")])
    # A second write of the same attempt is refused too: the outcome is recorded once.
    again = store.complete_jobs([Completion(one, JobState.SUCCEEDED, result_json="8")])
    assert again == [False]
