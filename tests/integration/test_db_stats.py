"""``ledgerq db stats`` on every backend: exact row counts of every ledger table, sizes, dead
rows where the database keeps them, connections, and a reason for each part the database
cannot tell (the shared servers run without pg_stat_statements and performance_schema; the
acceptance suite's private servers show those parts, see ``test_db_stats_servers.py``)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.cli.main import main
from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import jobs, metadata
from tests.helpers import wait_until


def stats(url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main(["--database-url", url, *argv, "db", "stats"]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in argv else out


def churn(url: str) -> None:
    """Five jobs, two of them deleted (dead rows where the database keeps them)."""
    engine = create_engine(url)
    try:
        store = SqlJobStore(engine)
        ids = [r.job_id for r in store.insert_jobs([NewJob("t", "q", "[]")] * 5)]
        with engine.begin() as conn:
            conn.execute(sa.delete(jobs).where(jobs.c.id.in_(ids[:2])))
    finally:
        engine.dispose()


def test_db_stats_reports_what_each_database_can_tell(
    backend: str, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    churn(database_url)
    report = stats(database_url, capsys, "--json")
    assert report["database"] == {"mysql": "mysql"}.get(backend, backend)
    tables = report["tables"]
    assert set(tables) == {*metadata.tables, "ledgerq_alembic_version"}
    assert tables["jobs"]["rows"] == 3 and tables["ledgerq_alembic_version"]["rows"] == 1
    assert tables["job_items"]["rows"] == 0
    assert tables["jobs"]["size_bytes"] > 0 and tables["jobs"]["index_bytes"] > 0
    assert report["ledger_bytes"] >= tables["jobs"]["size_bytes"]
    assert report["pool"]["size"] >= 1
    why = report["unavailable"]
    if backend == "sqlite":
        path = database_url.removeprefix("sqlite:///")
        assert report["size"]["size_bytes"] == os.path.getsize(path)
        assert report["size"]["free_bytes"] >= 0
        assert "index use" in why["indexes"] and "statement" in why["statements"]
        assert report["connections"] == {}
    elif backend == "postgresql":
        assert report["size"]["size_bytes"] > 0
        names = {(i["table"], i["index"]) for i in report["indexes"]}
        assert ("jobs", "ix_jobs_claimable") in names
        assert all(isinstance(i["scans"], int) for i in report["indexes"])
        connections = report["connections"]
        assert connections["max_connections"] > 0 and connections["this_database"] >= 1
        assert "pg_stat_statements" in why["statements"]  # the shared server has none

        def dead_rows() -> int:
            return int(stats(database_url, capsys, "--json")["tables"]["jobs"]["dead_rows"])

        wait_until(lambda: dead_rows() >= 2, timeout=20, what="the two deleted rows counted")
    else:
        assert tables["jobs"]["free_bytes"] >= 0
        connections = report["connections"]
        assert connections["max_connections"] > 0 and connections["this_database"] >= 1
        assert connections["server_total"] >= connections["this_database"]
        for section in ("indexes", "statements"):
            assert "performance_schema is off" in why[section]  # the shared server's default

    shown = stats(database_url, capsys)
    assert "tables" in shown and "jobs" in shown and "this process's pool" in shown
    for section in why:
        assert f"{section}: not available" in shown
