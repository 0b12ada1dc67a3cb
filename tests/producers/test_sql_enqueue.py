"""The SQL enqueue contract on PostgreSQL and MariaDB (docs/producers.md): a job enqueued by
``ledgerq_enqueue`` in the application's own transaction exists exactly when that transaction
commits, and a real worker runs it once; the options land in the row; dedupe keeps Python's
semantics; PostgreSQL's NOTIFY wakes an idle worker; a Redis-driver worker runs it too."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import downgrade, migrate
from ledgerq.store.tables import job_dedupe_windows, jobs
from tests.acceptance import effects_app
from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until
from tests.producers.calls import contract_version, sql_enqueue
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

Make = Callable[[str], Ledger]
SQL_BACKENDS = ("postgresql", "mysql")


def assert_ran_once(db: Ledger, keys: set[str]) -> None:
    assert db.failures() == {}
    assert set(db.effect_rows()) == keys
    assert db.duplicate_rows() == []
    assert {row.attempt for row in db.jobs().values()} == {1}


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_the_job_exists_exactly_when_the_callers_transaction_commits(
    ledger: Make, procs: Procs, backend_name: str
) -> None:
    db = ledger(backend_name)
    with db.engine.connect() as conn:
        with conn.begin() as tx:
            sql_enqueue(conn, effects_app.RECORD_EFFECT, ["rolled-back"])
            tx.rollback()
        assert db.job_count() == 0
        with conn.begin():
            job_id = sql_enqueue(conn, effects_app.RECORD_EFFECT, ["committed"])
            assert db.job_count() == 0  # another connection does not see it before the commit
    assert set(db.jobs()) == {job_id}
    result = procs.run(db.url, "worker", "start", "--burst", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert db.states() == {"succeeded": 1}
    assert_ran_once(db, {"committed"})


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_the_options_land_in_the_row(ledger: Make, backend_name: str) -> None:
    db = ledger(backend_name)
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    expires_at = run_at + timedelta(hours=1)
    with db.engine.begin() as conn:
        timed = sql_enqueue(
            conn,
            "reports.build",
            [7, "ü"],
            "reports",
            kwargs={"fmt": "pdf"},
            priority=-5,
            max_attempts=9,
            timeout=12.5,
            run_at=run_at.isoformat(),
            expires_at=expires_at.isoformat(),
        )
        delayed = sql_enqueue(conn, "reports.build", [], "reports", delay=30)
        held = sql_enqueue(conn, "reports.build", [], "reports", held=True)
    with db.engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(sa.select(jobs))}
    row = rows[timed]
    assert (row.queue, row.task, row.priority, row.max_attempts) == (
        "reports",
        "reports.build",
        -5,
        9,
    )
    assert row.timeout_seconds == 12.5 and row.state == "scheduled"
    assert _utc(row.run_at) == run_at and _utc(row.expires_at) == expires_at
    assert json.loads(row.args) == {"args": [7, "ü"], "kwargs": {"fmt": "pdf"}}
    assert rows[delayed].state == "scheduled"
    waited = (_utc(rows[delayed].run_at) - _utc(rows[delayed].created_at)).total_seconds()
    assert 29 < waited < 31, waited
    assert rows[held].state == "held"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_dedupe_keys_behave_as_in_python(ledger: Make, procs: Procs, backend_name: str) -> None:
    db = ledger(backend_name)
    task = effects_app.RECORD_EFFECT
    with db.engine.begin() as conn:
        first = sql_enqueue(conn, task, ["a"], dedupe_key="order-1")
        again = sql_enqueue(conn, task, ["a2"], dedupe_key="order-1")  # unfinished holder
        window = sql_enqueue(conn, task, ["w"], dedupe_key="order-2", dedupe_for=3600)
    assert again == first
    # Python's producer sees the same keys taken, in both directions.
    record = db.effects.record_effect
    assert record.enqueue("x", dedupe_key="order-1").job_id == first
    python_job = record.enqueue("p", dedupe_key="order-3", dedupe_for=3600).job_id
    with db.engine.begin() as conn:
        assert sql_enqueue(conn, task, ["p2"], dedupe_key="order-3") == python_job
    assert db.job_count() == 3
    result = procs.run(db.url, "worker", "start", "--burst", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_ran_once(db, {"a", "w", "p"})
    with db.engine.begin() as conn:
        # Finished: a key without a window is free again; a key within its window is not.
        fresh = sql_enqueue(conn, task, ["b"], dedupe_key="order-1")
        assert sql_enqueue(conn, task, ["w2"], dedupe_key="order-2", dedupe_for=3600) == window
    assert fresh not in (first, window)
    with db.engine.connect() as conn:
        w = job_dedupe_windows
        holders = {key: job for key, job in conn.execute(sa.select(w.c.dedupe_key, w.c.job_id))}
    assert holders == {"order-2": window, "order-3": python_job}


def test_notify_wakes_an_idle_postgresql_worker(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    # A poll interval far longer than the deadline below: only the NOTIFY can wake the worker.
    worker = procs.worker(db.url, "--driver", "dbpoll", env={"LEDGERQ_POLL_INTERVAL": "60"})
    with db.engine.begin() as conn:
        sql_enqueue(conn, effects_app.RECORD_EFFECT, ["first"])
    wait_until(lambda: db.ids_in("succeeded"), timeout=30, what="the first job ran")
    with db.engine.begin() as conn:  # the worker is idle now, waiting on LISTEN
        sql_enqueue(conn, effects_app.RECORD_EFFECT, ["woken"])
    wait_until(lambda: len(db.ids_in("succeeded")) == 2, timeout=10, what="NOTIFY woke the worker")
    assert worker.running()
    assert_ran_once(db, {"first", "woken"})


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_a_redis_driver_worker_runs_a_job_no_one_pushed(
    ledger: Make, procs: Procs, redis_server: RedisServer, backend_name: str
) -> None:
    db = ledger(backend_name)
    env = {
        "LEDGERQ_REDIS_URL": redis_server.url,
        "LEDGERQ_NAMESPACE": "sqlenq",
        "LEDGERQ_RECONCILE_INTERVAL": "1",
        "LEDGERQ_REQUEUE_AFTER": "1",
    }
    procs.worker(db.url, "--driver", "redis", env=env)
    with db.engine.begin() as conn:
        sql_enqueue(conn, effects_app.RECORD_EFFECT, ["unpushed"])
    wait_until(lambda: db.ids_in("succeeded"), timeout=30, what="the job ran")
    assert_ran_once(db, {"unpushed"})


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_downgrade_drops_the_routines_and_migrate_restores_them(
    make_database_url: Callable[[str], str], backend_name: str
) -> None:
    engine = create_engine(make_database_url(backend_name))
    try:
        with engine.connect() as conn:
            assert contract_version(conn) == 1
        downgrade(engine, "0013_postponed")
        with engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError):
                contract_version(conn)
            with pytest.raises(sa.exc.DBAPIError):
                sql_enqueue(conn, "t", [])
        migrate(engine)
        with engine.begin() as conn:
            assert sql_enqueue(conn, "t", []) > 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend_name", SQL_BACKENDS)
def test_a_concurrent_duplicate_waits_for_the_first_and_gets_its_job(
    ledger: Make, backend_name: str
) -> None:
    db = ledger(backend_name)
    # The application's own connections, at the server's default isolation (MariaDB:
    # REPEATABLE READ, where a plain read would keep a snapshot from before the first commit).
    engine = sa.create_engine(db.engine.url)
    results: dict[str, int] = {}
    try:
        with engine.connect() as first:
            first.begin()
            results["first"] = sql_enqueue(first, "t", [1], dedupe_key="race")
            with engine.connect() as second:
                second.begin()
                second.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one()

                def enqueue_second() -> None:
                    results["second"] = sql_enqueue(second, "t", [2], dedupe_key="race")
                    second.commit()

                thread = threading.Thread(target=enqueue_second)
                thread.start()
                thread.join(0.5)
                assert thread.is_alive(), "the duplicate did not wait for the first transaction"
                first.commit()
                thread.join(20)
    finally:
        engine.dispose()
    assert results["second"] == results["first"]
    assert set(db.jobs()) == {results["first"]}
