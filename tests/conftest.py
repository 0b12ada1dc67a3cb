"""Fixtures shared by every suite: one fresh, migrated database per test on each backend.

Isolation: SQLite gets a file in the test's tmp_path, PostgreSQL a schema of its own (via
``search_path``), MariaDB a database of its own; so tests run in parallel under xdist. URLs
come from ``LEDGERQ_TEST_{POSTGRES,MYSQL}_URL``. A missing service skips locally and fails
under ``CI``.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.redis_server import RedisServer

POSTGRES_URL = os.environ.get(
    "LEDGERQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("LEDGERQ_TEST_MYSQL_URL", "mariadb://root@127.0.0.1:3306/test")
BACKENDS = ("sqlite", "postgresql", "mysql")


def _unavailable(backend: str, exc: Exception) -> None:
    message = f"{backend} is not reachable: {exc}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _postgres_url(tag: str) -> Iterator[str]:
    admin = create_engine(POSTGRES_URL)
    schema = f"lq_{tag}"
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    except Exception as exc:
        admin.dispose()
        _unavailable("PostgreSQL", exc)
    options = urllib.parse.quote(f"-csearch_path={schema}")
    sep = "&" if "?" in POSTGRES_URL else "?"
    try:
        yield f"{POSTGRES_URL}{sep}options={options}"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def _mysql_url(tag: str) -> Iterator[str]:
    admin = create_engine(MYSQL_URL)
    database = f"lq_{tag}"
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {database}")
    except Exception as exc:
        admin.dispose()
        _unavailable("MariaDB/MySQL", exc)
    try:
        yield str(
            sa.make_url(MYSQL_URL).set(database=database).render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {database}")
        admin.dispose()


def fresh_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield the URL of an empty database of ``backend`` that is dropped afterwards."""
    tag = secrets.token_hex(5)
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'ledger-{tag}.db'}"
    elif backend == "postgresql":
        yield from _postgres_url(tag)
    else:
        yield from _mysql_url(tag)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    return str(request.param)


@pytest.fixture
def empty_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the current backend."""
    yield from fresh_database_url(backend, tmp_path)


@pytest.fixture
def database_url(empty_database_url: str) -> str:
    """A migrated, empty ledger of the current backend."""
    engine = create_engine(empty_database_url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    return empty_database_url


@pytest.fixture
def make_database_url(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Factory: a migrated ledger of the named backend (for tests pinned to one backend)."""
    cleanups: list[Iterator[str]] = []

    def make(backend_name: str) -> str:
        generator = fresh_database_url(backend_name, tmp_path)
        url = next(generator)
        cleanups.append(generator)
        engine = create_engine(url)
        try:
            migrate(engine)
        finally:
            engine.dispose()
        return url

    yield make
    for generator in cleanups:
        next(generator, None)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server on a free port, killed at the end of the test."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory)
    try:
        yield server
    finally:
        server.stop()
