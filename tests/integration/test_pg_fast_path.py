"""PostgreSQL's hot-path statements run on psycopg directly (store/postgres/fast.py): they share the
pool with SQLAlchemy, which always gets its connections in transaction mode (a fast statement
leaves its connection in autocommit for the next one), and survive a connection the server
killed."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.postgres import PostgresDriver
from ledgerq.store.postgres import statements as pg
from ledgerq.store.postgres.fast import GENERIC_PLANS_NAME
from ledgerq.store.tables import job_assignments, jobs


@pytest.fixture
def store(make_database_url: Callable[[str], str]) -> Iterator[SqlJobStore]:
    # One pooled connection: the fast path and SQLAlchemy take turns on the same one.
    engine = create_engine(make_database_url("postgresql"), pool_size=1)
    ledger = SqlJobStore(engine)
    assert isinstance(ledger.dialect, PostgresDriver), "PostgreSQL over psycopg takes the fast path"
    yield ledger
    engine.dispose()


def new() -> NewJob:
    return NewJob(task="t", queue="q", args_json="[]")


def claim(store: SqlJobStore, limit: int = 10) -> list[int]:
    found = store.claim_jobs(queues=["q"], worker_id="w", limit=limit, lease_seconds=30)
    return [job.id for job in found]


@contextmanager
def claiming_session(store: SqlJobStore) -> Iterator[Any]:
    """The session that claimed: the claims pool's connection, kept between the fast path's
    statements (see store/postgres/kept.py); kept again afterwards."""
    assert isinstance(store.dialect, PostgresDriver)
    fast = store.dialect.fast
    keeper = fast._kept[fast._generic_engine()]
    generation = keeper.generation
    pooled = keeper.take()
    assert pooled is not None, "the fast path keeps the session that claimed"
    try:
        yield pooled
    finally:
        keeper.keep(pooled, generation)


def test_connections_go_back_to_the_pool_in_transaction_mode(store: SqlJobStore) -> None:
    store.insert_jobs([new()])
    assert len(claim(store)) == 1  # autocommit on the pool's only connection, then reset
    with store.engine.connect() as conn:
        now = sa.func.now()
        row = {"task": "t", "queue": "q", "args": "[]", "state": "queued"}
        conn.execute(sa.insert(jobs).values(**row, run_at=now, created_at=now))
        conn.rollback()
    assert sum(store.count_jobs().values()) == 1, "a rolled-back insert must leave no row"


def test_a_transaction_left_open_is_rolled_back_when_its_connection_returns(
    store: SqlJobStore,
) -> None:
    # The engines roll back only connections handed back inside a transaction (not every
    # idle one): one abandoned mid-way must not leak its insert into the next user's.
    fast = store.dialect.fast
    row = "INSERT INTO jobs (task, queue, args, state, run_at, created_at)"
    with pytest.raises(RuntimeError), fast.transaction() as cursor:
        cursor.execute(row + " VALUES ('t', 'q', '[]', 'queued', now(), now())")
        raise RuntimeError("abandoned before its commit")
    assert sum(store.count_jobs().values()) == 0
    store.insert_jobs([new()])
    assert len(claim(store)) == 1
    assert sum(store.count_jobs().values()) == 1


def test_a_connection_the_server_killed_fails_one_call_then_heals(store: SqlJobStore) -> None:
    store.insert_jobs([new(), new()])
    assert len(claim(store, limit=1)) == 1
    assert isinstance(store.dialect, PostgresDriver)
    with claiming_session(store) as pooled:
        cursor = pooled.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        [(pid,)] = cursor.fetchall()
    admin = create_engine(str(store.engine.url.render_as_string(hide_password=False)))
    with admin.connect() as conn:
        assert conn.execute(sa.select(sa.func.pg_terminate_backend(pid))).scalar() is True
    admin.dispose()
    with pytest.raises(errors.StoreUnavailable):
        claim(store)
    assert len(claim(store)) == 1  # a fresh connection


def test_a_hinted_claim_reads_by_primary_key_even_with_stale_statistics(
    store: SqlJobStore,
) -> None:
    # A burst into a table the planner has no statistics for (as after a fresh install or a
    # quiet spell): it once chose to scan every queued row of the claimable index per claim.
    ids = [r.job_id for r in store.insert_jobs([new() for _ in range(5000)])]
    values = pg.hinted_claim_values(
        {"hint_ids": ids[:16], "claim_limit": 16, "claim_worker": "w", "lease_s": 30.0}, ["q"]
    )
    with store.engine.connect() as conn:
        plan = "\n".join(
            row[0] for row in conn.execute(sa.text("EXPLAIN " + pg.CLAIM_HINTED.text), values)
        )
        conn.rollback()
    assert "pk_jobs" in plan
    assert "ix_jobs_claimable" not in plan and "ix_jobs_state_queue" not in plan, plan
    hinted = store.claim_jobs(
        queues=["q"], worker_id="w", limit=16, lease_seconds=30, job_ids=ids[:16]
    )
    assert [job.id for job in hinted] == ids[:16]


def test_completions_and_heartbeats_read_by_primary_key_even_with_stale_statistics(
    store: SqlJobStore,
) -> None:
    # After a burst the planner believed the index of running jobs tiny and scanned all of it
    # (it keeps a dead entry for every job that ever ran), and joined the per-job values in a
    # nested loop that rescanned them once per job.
    store.insert_jobs([new() for _ in range(5000)])
    running = store.claim_jobs(queues=["q"], worker_id="w", limit=100, lease_seconds=30)
    params = [
        {
            "claim_id": job.id,
            "claim_attempt": job.attempt,
            "new_state": "succeeded",
            "new_result": "1",
            "new_error": None,
            "retry_delay": 0.0,
            "ran_s": 0.001,
        }
        for job in running
    ]
    ids, attempts = [job.id for job in running], [job.attempt for job in running]
    statements = [
        (pg.COMPLETE_GROUP, pg.complete_group_values(params)),
        (pg.HEARTBEAT_GROUP, pg.heartbeat_values(ids, attempts, 30.0)),
    ]
    with store.engine.connect() as conn:
        for statement, values in statements:
            plan = "\n".join(
                row[0] for row in conn.execute(sa.text("EXPLAIN " + statement.text), values)
            )
            # (A sequential scan of a table this small may be chosen: it is bounded by the
            # table's size, which the planner knows from the file, unlike those two.)
            for wrong in ("ix_jobs_running_worker", "Function Scan"):
                assert wrong not in plan, plan
        conn.rollback()
    beats = [Claim(i, a) for i, a in zip(ids, attempts, strict=True)]
    assert store.heartbeat_jobs(beats, lease_seconds=30) == [True] * 100


def _history(store: SqlJobStore) -> dict[tuple[int, int], sa.Row[tuple[object, ...]]]:
    a = job_assignments
    with store.engine.connect() as conn:
        columns = (a.c.worker_id, a.c.started_at, a.c.ended_at, a.c.outcome)
        rows = conn.execute(sa.select(a.c.job_id, a.c.attempt, *columns))
        return {(r.job_id, r.attempt): r for r in rows}


def test_an_attempts_history_row_is_written_once_by_the_statement_that_ends_it(
    store: SqlJobStore,
) -> None:
    """Claims write no history (it cost PostgreSQL a row and three index entries per job); the
    completion inserts the closed row with the claim's worker and start."""
    ids = [r.job_id for r in store.insert_jobs([new(), new(), new()])]
    by_query = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
    hinted = store.claim_jobs(
        queues=["q"], worker_id="w", limit=5, lease_seconds=30, job_ids=ids[1:]
    )
    started = {job.id: job.claimed_at for job in [*by_query, *hinted]}
    assert sorted(started) == ids and _history(store) == {}
    done = [
        Completion(Claim(ids[0], 1), JobState.SUCCEEDED, result_json="1"),
        Completion(Claim(ids[1], 1), JobState.FAILED, retry_delay_seconds=60),
    ]
    assert store.complete_jobs(done) == [True, True]
    history = _history(store)
    assert sorted(history) == [(ids[0], 1), (ids[1], 1)]
    assert [history[(i, 1)].outcome for i in ids[:2]] == ["succeeded", "failed"]
    for job_id in ids[:2]:
        row = history[(job_id, 1)]
        assert row.worker_id == "w" and row.started_at == started[job_id]
        assert row.ended_at >= row.started_at
    # A refused completion writes nothing.
    assert store.complete_jobs([Completion(Claim(ids[0], 1), JobState.SUCCEEDED)]) == [False]
    assert _history(store) == history


def test_a_completion_closes_a_row_an_earlier_release_opened_at_its_claim(
    store: SqlJobStore,
) -> None:
    """During a rolling upgrade an older worker's claim inserted an open row; the completion
    closes that row instead of failing on the unique (job, attempt) key."""
    [job_id] = [r.job_id for r in store.insert_jobs([new()])]
    [job] = store.claim_jobs(queues=["q"], worker_id="old", limit=1, lease_seconds=30)
    with store.engine.begin() as conn:
        conn.execute(
            sa.insert(job_assignments).values(
                job_id=job_id, attempt=1, worker_id="old", started_at=job.claimed_at
            )
        )
    assert store.complete_jobs([Completion(Claim(job_id, 1), JobState.SUCCEEDED)]) == [True]
    [row] = _history(store).values()
    assert (row.worker_id, row.outcome) == ("old", "succeeded") and row.ended_at is not None


def test_hinted_claims_are_planned_once_for_every_set_of_ids(store: SqlJobStore) -> None:
    """Claims of handed-over ids run on sessions that plan them generically: PostgreSQL would
    otherwise plan a claim of a few ids anew on every call (a custom plan), which doubled it."""
    ids = [r.job_id for r in store.insert_jobs([new() for _ in range(12)])]
    for job_id in ids:  # one id per claim, as a worker at a steady trickle claims them
        [job] = store.claim_jobs(
            queues=["q"], worker_id="w", limit=1, lease_seconds=30, job_ids=[job_id]
        )
        assert job.id == job_id
    assert isinstance(store.dialect, PostgresDriver)
    generic = store.dialect.fast._generic_engine()
    with claiming_session(store) as pooled:
        cursor = pooled.cursor()
        cursor.execute(
            "SELECT generic_plans, custom_plans, current_setting('application_name')"
            " FROM pg_prepared_statements WHERE statement LIKE 'WITH claimed AS%%'"
        )
        [(generic_plans, custom_plans, name)] = cursor.fetchall()
    assert (generic_plans, custom_plans) == (len(ids), 0)
    assert name == GENERIC_PLANS_NAME
    store.engine.dispose()  # disposing the store's engine closes the generic pool with it
    assert generic.pool.checkedin() == 0


def test_claims_by_query_are_planned_once(store: SqlJobStore) -> None:
    """A claim by query runs on the sessions that plan generically too: re-planning it cost
    PostgreSQL 0.13-0.16 ms per claim, and left to itself PostgreSQL may settle on either plan
    (see the next tests for why the generic one is safe)."""
    store.insert_jobs([new() for _ in range(12)])
    for _ in range(12):
        assert len(claim(store, limit=1)) == 1
    assert isinstance(store.dialect, PostgresDriver)
    with claiming_session(store) as pooled:
        cursor = pooled.cursor()
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'UPDATE jobs SET state%%'"
        )
        assert cursor.fetchall() == [(12, 0)]


def _generic_plan(
    store: SqlJobStore, statement: sa.ClauseElement, values: dict[str, object]
) -> str:
    """EXPLAIN of ``statement``'s generic plan (the plan a prepared statement may settle on,
    which sees no parameter values) on one of the store's sessions."""
    sql = str(statement.compile(dialect=store.engine.dialect))
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", numbered, sql)
    pooled = store.engine.raw_connection()  # the test's schema is set on the pool's sessions
    try:
        cursor = psycopg.ClientCursor(pooled.driver_connection)  # literals: EXECUTE takes no $n
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE planned AS {prepared}")  # type: ignore[call-overload]
        arguments = ", ".join(["%s"] * len(names))
        cursor.execute(
            f"EXPLAIN EXECUTE planned({arguments})",  # type: ignore[call-overload]
            [values[name] for name in names],
        )
        return "\n".join(row[0] for row in cursor.fetchall())
    finally:
        pooled.invalidate()  # the session's plan setting and prepared statement go with it


def test_the_generic_plan_of_a_hinted_claim_reads_by_primary_key(store: SqlJobStore) -> None:
    """The one plan serves any ids, so it must not depend on them: primary key lookups, even
    with stale statistics after a burst into an empty table."""
    ids = [r.job_id for r in store.insert_jobs([new() for _ in range(5000)])]
    values = pg.hinted_claim_values(
        {"hint_ids": ids[:3], "claim_limit": 3, "claim_worker": "w", "lease_s": 30.0}, ["q"]
    )
    plan = _generic_plan(store, pg.CLAIM_HINTED, values)
    # Generic: the ids stay a parameter of the plan (a custom plan shows the literal array).
    assert re.search(r"id = ANY \(\$\d+\)", plan), plan
    assert "pk_jobs" in plan
    assert "ix_jobs_claimable" not in plan and "ix_jobs_state_queue" not in plan, plan


@pytest.mark.parametrize("queues", [("q",), ("q", "other")])
@pytest.mark.parametrize("burst", [0, 5000])
def test_the_generic_plan_of_a_claim_by_query_reads_the_claimable_index_in_order(
    store: SqlJobStore, queues: tuple[str, ...], burst: int
) -> None:
    """PostgreSQL settles on a claim's generic plan after a few calls when it looks no dearer
    than the custom ones. That plan sees no parameter values, so a queued-state test that is
    a parameter cannot use the partial index of queued rows: it read every queued row of the
    queue and sorted them, per claim (8.8 ms against 0.24 ms with 20,000 queued). The state
    is therefore a literal of the statement."""
    # Planned once per session, maybe on an empty table (a worker that started idle) or just
    # after a burst the planner has no statistics for: either plan must read the index.
    store.insert_jobs([new() for _ in range(burst)])
    store.claim_jobs(queues=list(queues), worker_id="w", limit=10, lease_seconds=30)
    built = store._claims[queues]  # the claim of these queues, as the store built it
    values = {
        **built.compile(dialect=store.engine.dialect).params,
        "claim_limit": 16,
        "candidate_limit": 32,
        "claim_worker": "w",
        "lease_s": 30.0,
    }
    plan = _generic_plan(store, built, values).splitlines()
    scans = [i for i, line in enumerate(plan) if "Scan using ix_jobs_claimable" in line]
    assert len(scans) == len(queues), plan  # one range of the index per queue
    for i in scans:  # each reads its queue's range in order and stops at the limit
        assert "Index Cond:" in plan[i + 1] and "queue" in plan[i + 1], plan
    assert not any("ix_jobs_state_queue" in line for line in plan), plan
    if len(queues) == 1:
        assert not any("Sort" in line for line in plan), plan


def test_sessions_speak_utc_so_claimed_timestamps_need_no_conversion(
    make_database_url: Callable[[str], str],
) -> None:
    """Every pool's sessions run in UTC: psycopg then hands back ``datetime.UTC`` itself, and a
    claim builds its jobs without converting each timestamp (a server in ``Etc/UTC`` or any
    other zone made psycopg and ``Job.from_row`` convert seven timestamps per claimed job)."""
    url = make_database_url("postgresql")
    engine = create_engine(url, pool_size=1)
    relaxed = create_engine(url, pool_size=1, relaxed=True)
    store = SqlJobStore(engine, relaxed)
    try:
        ids = [r.job_id for r in store.insert_jobs([new(), new()])]
        before = datetime.now(UTC)
        [by_query] = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
        [hinted] = store.claim_jobs(
            queues=["q"], worker_id="w", limit=1, lease_seconds=30, job_ids=[ids[1]]
        )
        for job in (by_query, hinted):
            for stamp in (job.run_at, job.created_at, job.claimed_at, job.lease_expires_at):
                assert stamp is not None and stamp.tzinfo is UTC
            assert job.claimed_at is not None and job.started_at is None  # not started yet
            assert abs((job.claimed_at - before).total_seconds()) < 60  # the same instant
        assert isinstance(store.dialect, PostgresDriver)
        for pool in (engine, relaxed, store.dialect.fast._generic_engine()):
            pooled = pool.raw_connection()
            try:
                cursor = pooled.cursor()
                cursor.execute("SELECT current_setting('TimeZone')")
                assert cursor.fetchall() == [("UTC",)]
            finally:
                pooled.close()
    finally:
        relaxed.dispose()
        engine.dispose()


def test_a_group_with_two_attempts_of_one_job_is_split_so_each_statement_takes_an_id_once() -> None:
    # Entries are found by job id, then fenced on the attempt: two attempts of one job in one
    # statement would find the first entry for both. Order is kept within each part.
    assert pg.unique_id_parts([(5, 1), (7, 1), (9, 2)]) == [[0, 1, 2]]
    assert pg.unique_id_parts([(5, 1), (7, 1), (5, 2), (8, 1), (5, 3)]) == [[0, 1, 3], [2], [4]]
    assert pg.unique_id_parts([]) == []
