"""The pooler mode leaves no state on a server session: the same hot path that prepares its
statements on direct connections prepares none, so a transaction-pooling proxy may hand the
next transaction to any session (the contract suite runs through a real PgBouncer)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import psycopg
import pytest

from ledgerq.core.job import Claim, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState as S
from ledgerq.store.dialects import Pooler
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from tests.conftest import POSTGRES_URL
from tests.pgbouncer_server import PgBouncer


def _prepared_after_a_round(url: str, pooler: Pooler | None) -> int:
    """Enqueue, claim, heartbeat and complete on a one-connection engine; then count the
    prepared statements its session holds."""
    engine = create_engine(url, pool_size=1, pooler=pooler)
    store = SqlJobStore(engine, engine)
    try:
        for _ in range(3):  # psycopg prepares on first use at threshold 0
            store.insert_jobs([NewJob(task="t", queue="q", args_json='{"args":[],"kwargs":{}}')])
            jobs = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
            done = [Completion(Claim(j.id, j.attempt), S.SUCCEEDED, result_json="1") for j in jobs]
            assert store.complete_jobs(done) == [True]
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar())
    finally:
        engine.dispose()


@pytest.mark.parametrize(("pooler", "prepares"), [(None, True), (Pooler(), False)])
def test_only_direct_connections_prepare_statements(
    make_database_url: Callable[[str], str], pooler: Pooler | None, prepares: bool
) -> None:
    url = make_database_url("postgresql")
    assert (_prepared_after_a_round(url, pooler) > 0) is prepares


def test_pooled_sessions_run_in_utc_on_every_server_session_they_get(
    tmp_path: Path, make_database_url: Callable[[str], str]
) -> None:
    """The time zone is set once per client connection, and PgBouncer re-applies it on every
    server session it lends that client, while a plain client of the same sessions keeps the
    server's zone: nothing leaks either way."""
    make_database_url("postgresql")  # skips, or fails under CI, without PostgreSQL
    binary = PgBouncer.binary()
    if binary is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("pgbouncer is not installed")
        return
    bouncer = PgBouncer(tmp_path / "tz", POSTGRES_URL, "public", binary, "America/New_York")
    engine = create_engine(bouncer.url, pool_size=1, pooler=Pooler())
    try:
        with psycopg.connect(bouncer.url, autocommit=True) as plain, engine.connect() as conn:
            for _ in range(3):  # the pool has 4 server sessions: the two clients share them
                assert conn.exec_driver_sql("SHOW timezone").scalar() == "UTC"
                assert conn.exec_driver_sql("SELECT now()").scalar().tzinfo == UTC
                conn.commit()
                zone = plain.execute("SHOW timezone").fetchone()
                assert zone == ("America/New_York",)
    finally:
        engine.dispose()
        bouncer.stop()
