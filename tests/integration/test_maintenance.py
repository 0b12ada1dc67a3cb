"""PostgreSQL under churn: the ledger vacuums its own table when dead rows pile up."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.postgres import MAINTAIN_DEAD_TUPLES
from tests.helpers import wait_until

STATS = sa.text(
    "SELECT n_dead_tup, vacuum_count + autovacuum_count FROM pg_stat_user_tables"
    " WHERE relid = to_regclass('jobs')"
)


def test_dead_rows_are_vacuumed_by_a_worker(make_database_url: Callable[[str], str]) -> None:
    engine = create_engine(make_database_url("postgresql"))
    store = SqlJobStore(engine)
    try:
        assert store.maintain_tables() is False  # nothing to do on a fresh table
        rows = MAINTAIN_DEAD_TUPLES + 2000
        store.insert_jobs([NewJob(task="t", queue="q", args_json="{}") for _ in range(rows)])
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM jobs")

        def dead_rows() -> int:
            with engine.connect() as conn:
                return int(conn.execute(STATS).one()[0])

        wait_until(lambda: dead_rows() >= MAINTAIN_DEAD_TUPLES, timeout=30, what="stats")
        assert store.maintain_tables() is True
        with engine.connect() as conn:
            assert conn.execute(STATS).one()[1] >= 1
    finally:
        engine.dispose()
