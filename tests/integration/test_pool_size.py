"""``LEDGERQ_DB_POOL_SIZE`` bounds each engine on every database: the size kept and as many
again in overflow, the bound docs/scaling.md gives for ``max_connections``. Direct PostgreSQL
engines once got SQLAlchemy's default (5 kept, 10 overflow) whatever was asked. More callers
than the bound wait for a connection; none fails."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from ledgerq.store.drivers import driver_type
from ledgerq.store.engine import create_engine
from tests.conftest import direct_url_of, engine_for


def test_an_engine_keeps_the_asked_pool_and_as_many_again_in_overflow(database_url: str) -> None:
    engine = engine_for(database_url, pool_size=3)
    try:
        pool = engine.pool
        assert isinstance(pool, sa.QueuePool)
        assert (pool.size(), pool._max_overflow) == (3, 3)
    finally:
        engine.dispose()


def test_the_claims_pool_is_the_documented_four(database_url: str) -> None:
    """The pool of claims and heartbeats (PostgreSQL, direct only): 2 kept, 4 at most."""
    engine = create_engine(database_url)
    try:
        relaxed = (
            None
            if direct_url_of(database_url) is not None
            else driver_type(engine.dialect.name).relaxed_pool(database_url)
        )
        if relaxed is None:
            pytest.skip("no pool of its own for claims: the store's engine serves them here")
        assert isinstance(relaxed.pool, sa.QueuePool)
        assert (relaxed.pool.size(), relaxed.pool._max_overflow) == (2, 2)
        relaxed.dispose()
    finally:
        engine.dispose()


def test_callers_beyond_the_bound_wait_and_all_finish(database_url: str) -> None:
    engine = engine_for(database_url, pool_size=1)  # two connections at most
    done: list[int] = []
    errors: list[BaseException] = []

    def query(n: int) -> None:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1")).scalar_one()
                threading.Event().wait(0.05)  # hold the connection a moment
            done.append(n)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=query, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == [] and sorted(done) == list(range(8))
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()
