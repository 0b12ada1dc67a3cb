"""The fast path runs its statements with libpq's prepared-statement calls, without a cursor
(store/postgres/prepared.py): rows hold the values a cursor gives, a statement is prepared
once per session and parameter types, a failed statement raises the database's error, a
session reset and a lost session are survived, and other threads run while it waits."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg.rows import dict_row

from ledgerq.core import errors
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.postgres import PostgresDriver, prepared
from ledgerq.store.postgres.fast import FastStatements
from ledgerq.store.postgres.prepared import PreparedSql
from tests.integration import test_pg_kept_connection as kept_tests
from tests.integration.test_pg_kept_connection import PID, fast_pid

VALUES = sa.text(
    "SELECT CAST(:n AS bigint) AS n, CAST(:t AS text) AS t, CAST(:f AS float8) AS f,"
    " CAST(:b AS boolean) AS b, CAST(:ts AS timestamptz) AS ts, CAST(:ids AS bigint[]) AS ids,"
    " CAST(:missing AS text) AS missing, '100%' AS pct, CAST(:n AS bigint) + 1 AS again"
)
PARAMS: dict[str, Any] = {
    "n": 7,
    "t": "naïve 'quoted' \\ text",
    "f": 0.25,
    "b": True,
    "ts": datetime(2026, 12, 7, 18, 0, 1, 250_000, tzinfo=UTC),
    "ids": [3, 1, 2],
    "missing": None,
}
OURS = sa.text("SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'lq\\_%'")

store = kept_tests.store  # the fixture: a PostgreSQL job store on the fast path


def fast(store: SqlJobStore) -> FastStatements:
    assert isinstance(store.dialect, PostgresDriver)
    return store.dialect.fast


def prepared_here(store: SqlJobStore, sql: bytes) -> int:
    """How many of this module's prepared statements of ``sql`` the fast session holds."""
    return sum(1 for _, text in fast(store).rows(OURS, {}) if text == sql.decode())


def test_placeholders_become_positions_and_percent_signs_stay() -> None:
    found = PreparedSql("SELECT %(a)s, %(b)s, %(a)s, '100%%', '%%(a)s'")
    assert found.sql == b"SELECT $1, $2, $1, '100%', '%(a)s'"
    assert found.names == ("a", "b")


def test_rows_hold_what_a_cursor_gives(store: SqlJobStore) -> None:
    sql = str(VALUES.compile(dialect=store.engine.dialect))
    raw = store.engine.raw_connection()
    try:
        with raw.driver_connection.cursor(row_factory=dict_row) as cursor:  # type: ignore[union-attr]
            cursor.execute(sql, PARAMS)
            [expected] = cursor.fetchall()
        raw.driver_connection.rollback()  # type: ignore[union-attr]
    finally:
        raw.close()
    [as_dict] = fast(store).mappings(VALUES, PARAMS)
    [as_tuple] = fast(store).rows(VALUES, PARAMS)
    assert as_dict == expected
    assert as_tuple == tuple(expected.values())
    assert as_dict["ts"] == PARAMS["ts"] and as_dict["ts"].utcoffset() is not None
    assert as_dict["pct"] == "100%" and as_dict["again"] == 8 and as_dict["missing"] is None


def test_a_statement_is_prepared_once_per_session_and_parameter_types(store: SqlJobStore) -> None:
    statement = sa.text("SELECT CAST(:n AS numeric) AS n")
    sql = PreparedSql(str(statement.compile(dialect=store.engine.dialect))).sql
    pid = fast_pid(store)
    for n in range(5):
        assert fast(store).rows(statement, {"n": n}) == [(n,)]
    assert prepared_here(store, sql) == 1
    # A value psycopg sends as another type (int8, not int2) needs a statement of its own.
    assert fast(store).rows(statement, {"n": 2**40}) == [(2**40,)]
    assert prepared_here(store, sql) == 2
    assert fast_pid(store) == pid  # all on the one kept session


def test_a_failed_statement_raises_the_database_error_and_the_next_one_runs(
    store: SqlJobStore,
) -> None:
    with pytest.raises(errors.StoreError, match="division by zero"):
        fast(store).rows(sa.text("SELECT 1 / CAST(:zero AS int)"), {"zero": 0})
    assert fast(store).rows(VALUES, PARAMS)[0][0] == 7


def test_statements_the_server_forgot_are_prepared_again(store: SqlJobStore) -> None:
    sql = PreparedSql(str(VALUES.compile(dialect=store.engine.dialect))).sql
    assert fast(store).rows(VALUES, PARAMS)[0][0] == 7
    pid = fast_pid(store)
    keeper = fast(store)._kept[store.engine]
    generation = keeper.generation
    pooled = keeper.take()
    assert pooled is not None
    pooled.driver_connection.execute("DEALLOCATE ALL")  # type: ignore[union-attr]
    keeper.keep(pooled, generation)
    assert prepared_here(store, sql) == 0
    assert fast(store).rows(VALUES, PARAMS)[0][0] == 7
    assert prepared_here(store, sql) == 1
    assert fast_pid(store) == pid


def test_a_lost_session_is_an_outage_and_the_next_statement_opens_another(
    store: SqlJobStore,
) -> None:
    pid = fast_pid(store)
    with store.engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        conn.commit()
    with pytest.raises(errors.StoreUnavailable):
        fast(store).rows(VALUES, PARAMS)
    assert fast(store).rows(VALUES, PARAMS)[0][0] == 7
    assert fast_pid(store) != pid


def test_other_threads_run_while_a_statement_waits(store: SqlJobStore) -> None:
    progress: list[float] = []
    stop = threading.Event()

    def count() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            if n % 1_000 == 0:
                progress.append(time.monotonic())

    fast(store).rows(PID, {})  # connected and prepared before counting
    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        started = time.monotonic()
        fast(store).rows(sa.text("SELECT pg_sleep(CAST(:s AS float8))"), {"s": 0.4})
        ended = time.monotonic()
    finally:
        stop.set()
        counter.join()
    # Holding the GIL for the wait, the counter would not move in the middle of it.
    assert any(started + 0.1 < at < ended - 0.1 for at in progress)


def test_a_statement_is_known_by_its_text_not_by_the_object(store: SqlJobStore) -> None:
    # A session outlives the objects of whoever ran statements on it: a new object (maybe at
    # a dead one's address) must find the statement by what it says.
    text = "SELECT CAST(%(n)s AS bigint) + 1"
    keeper = fast(store)._kept[store.engine]
    fast(store).rows(PID, {})  # a session is kept
    generation = keeper.generation
    pooled = keeper.take()
    assert pooled is not None
    try:
        objects = [PreparedSql(text) for _ in range(3)]  # alive together: distinct objects
        for n, statement in enumerate(objects):
            assert prepared.run(pooled, statement, {"n": n}, as_dicts=False) == [(n + 1,)]
        found = pooled.driver_connection.execute(  # type: ignore[union-attr]
            "SELECT count(*) FROM pg_prepared_statements WHERE statement = %s",
            (PreparedSql(text).sql.decode(),),
        ).fetchone()
        assert found == (1,)
    finally:
        keeper.keep(pooled, generation)
