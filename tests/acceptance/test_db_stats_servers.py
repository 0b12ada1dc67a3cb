"""``ledgerq db stats`` where the database keeps statement statistics: a private PostgreSQL
with ``pg_stat_statements`` preloaded, a private MariaDB with ``performance_schema`` on. The
ledger's own statements (the claim, the enqueue) appear among the slowest, and MariaDB counts
index use."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ledgerq.cli.main import main
from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.migrate import migrate
from tests.acceptance.private_servers import PrivateMariadb, PrivatePostgres

pytestmark = pytest.mark.timeout(180)


def exercise(url: str) -> None:
    """Migrate, enqueue and claim: the ledger's statements run."""
    engine = create_engine(url)
    try:
        migrate(engine)
        store = SqlJobStore(engine)
        store.insert_jobs([NewJob("t", "q", "[]")] * 5)
        for _ in range(3):
            store.claim_jobs(queues=["q"], worker_id="w", limit=2, lease_seconds=30)
    finally:
        engine.dispose()


def report(url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["--database-url", url, "--json", "db", "stats", "--statements", "50"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.configure("shared_preload_libraries = 'pg_stat_statements'")
        server.stop_immediately()
        server.start()
        server.sql("CREATE EXTENSION pg_stat_statements")
        yield server
    finally:
        server.close()


def test_postgres_with_pg_stat_statements(
    postgres: PrivatePostgres, capsys: pytest.CaptureFixture[str]
) -> None:
    exercise(postgres.url)
    found = report(postgres.url, capsys)
    assert "statements" not in found["unavailable"]  # type: ignore[operator]
    statements = found["statements"]
    assert isinstance(statements, list) and statements
    assert any("jobs" in s["query"] and s["calls"] >= 1 for s in statements)
    means = [s["mean_ms"] for s in statements]
    assert means == sorted(means, reverse=True)  # the slowest first


def test_mariadb_with_performance_schema(capsys: pytest.CaptureFixture[str]) -> None:
    server = PrivateMariadb("--performance-schema=ON")
    try:
        exercise(server.url)
        found = report(server.url, capsys)
    finally:
        server.close()
    assert found["unavailable"] == {}
    statements = found["statements"]
    assert isinstance(statements, list)
    assert any("jobs" in s["query"] and s["calls"] >= 1 for s in statements)
    indexes = found["indexes"]
    assert isinstance(indexes, list)
    assert any(i["table"] == "jobs" and i["index"] == "PRIMARY" for i in indexes)
    assert sum(i["scans"] for i in indexes if i["table"] == "jobs") > 0
