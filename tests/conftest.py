"""Fixtures shared by every suite: one fresh, migrated database per test on each backend.

Isolation: SQLite gets a file in the test's tmp_path, PostgreSQL a schema of its own (via
``search_path``), MariaDB a database of its own; so tests run in parallel under xdist. URLs
come from ``LEDGERQ_TEST_{POSTGRES,MYSQL}_URL``. A missing service skips locally and fails
under ``CI``.

``pgbouncer`` (not in ``BACKENDS``; suites that run through it add it, see
tests/contract/conftest.py) is a PostgreSQL ledger reached through a private PgBouncer in
transaction pooling mode; ``engine_for`` gives such a URL's engine the pooler mode.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.store.dialects import Pooler
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.pgbouncer_server import PgBouncer
from tests.redis_server import RedisServer

POSTGRES_URL = os.environ.get(
    "LEDGERQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("LEDGERQ_TEST_MYSQL_URL", "mariadb://root@127.0.0.1:3306/test")
BACKENDS = ("sqlite", "postgresql", "mysql")
#: ``BACKENDS`` and PostgreSQL through PgBouncer (transaction pooling).
POOLED_BACKENDS = (*BACKENDS, "pgbouncer")
#: Each ledger a test reaches through its PgBouncer: the PgBouncer and the direct URL, by
#: PgBouncer URL.
_POOLED: dict[str, tuple[PgBouncer, str]] = {}


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


def _pgbouncer_url(tag: str, tmp_path: Path) -> Iterator[str]:
    binary = PgBouncer.binary()
    if binary is None:
        _unavailable("PgBouncer", RuntimeError("pgbouncer is not installed (Debian: pgbouncer)"))
        return
    schema = _postgres_url(tag)
    direct = next(schema)
    try:
        bouncer = PgBouncer(tmp_path / f"pgbouncer-{tag}", POSTGRES_URL, f"lq_{tag}", binary)
    except BaseException:
        next(schema, None)
        raise
    _POOLED[bouncer.url] = (bouncer, direct)
    try:
        yield bouncer.url
    finally:
        del _POOLED[bouncer.url]
        bouncer.stop()
        next(schema, None)


def direct_url_of(url: str) -> str | None:
    """The URL that bypasses the PgBouncer of ``url`` (None: ``url`` is no PgBouncer's)."""
    found = _POOLED.get(url)
    return None if found is None else found[1]


def pgbouncer_of(url: str) -> PgBouncer:
    """The test's PgBouncer that ``url`` leads to."""
    return _POOLED[url][0]


def pooler_env(url: str) -> dict[str, str]:
    """The settings a ledgerq process needs for ``url`` beside ``LEDGERQ_DATABASE_URL``."""
    direct = direct_url_of(url)
    if direct is None:
        return {}
    return {"LEDGERQ_DB_POOLER": "pgbouncer", "LEDGERQ_DATABASE_DIRECT_URL": direct}


def engine_for(url: str, **kwargs: Any) -> sa.Engine:
    """``create_engine(url)``, in pooler mode (LISTEN over the direct URL) when ``url`` leads
    to a test's PgBouncer."""
    direct = direct_url_of(url)
    pooler = None if direct is None else Pooler("pgbouncer", direct)
    return create_engine(url, pooler=pooler, **kwargs)


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
    elif backend == "pgbouncer":
        yield from _pgbouncer_url(tag, tmp_path)
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
    engine = engine_for(empty_database_url)
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
        engine = engine_for(url)
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
