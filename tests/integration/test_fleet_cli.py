"""The fleet commands in-process, through ``main(argv)``, on every backend: a worker run
leaves a registry row, history and health checks; operators list, inspect, fail over,
deregister, validate, export and clean up."""

from __future__ import annotations

import json

import pytest

from ledgerq.cli.main import main
from ledgerq.core import fleet
from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from tests.helpers import wait_until

#: Long enough that a loaded machine cannot make a fresh heartbeat look stale.
TTL_SECONDS = 3.0


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("LEDGERQ_WORKER_TTL", str(TTL_SECONDS))
    monkeypatch.setenv("LEDGERQ_HEARTBEAT_INTERVAL", "0.2")
    monkeypatch.setenv("LEDGERQ_FAILOVER_CHECK_INTERVAL", "0.5")
    return database_url


def run(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    capsys.readouterr()
    assert main(list(argv)) == code, capsys.readouterr()
    return capsys.readouterr().out


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> object:
    return json.loads(run(capsys, "--json", *argv, code=code))


def test_fleet_commands(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    engine = create_engine(env)
    admin, jobs = SqlFleetAdmin(engine), SqlJobStore(engine)
    try:
        admin.register_worker(fleet.Registration("h:1:a", "h", 1, ("default",), 4, "0.1.0"))
        admin.register_worker(fleet.Registration("h:2:b", "h", 2, ("default",), 4, "0.1.0"))
        admin.record_health_check(fleet.HealthCheck("h:1:a", 1.0, None, 50.0, 2.0, 0, 0.1))
        (job_id,) = [r.job_id for r in jobs.insert_jobs([NewJob("t", "default", "[]")])]
        jobs.claim_jobs(queues=["default"], worker_id="h:1:a", limit=1, lease_seconds=60)

        listed = run_json(capsys, "worker", "list")
        assert [w["worker_id"] for w in listed] == ["h:1:a", "h:2:b"]  # type: ignore[index,union-attr]
        admin.heartbeat_worker("h:1:a", fleet.Pulse(0, 0, 0.1))
        assert run_json(capsys, "worker", "health", "--worker-id", "h:1:a")["healthy"] is True  # type: ignore[index]
        usage = run_json(capsys, "worker", "resource-stats")
        assert usage["workers"]["h:1:a"]["memory_mb"] == 50.0  # type: ignore[index]
        assert "h:1:a" in run(capsys, "worker", "list")

        # Heartbeats stop: after the TTL both are stale; failover-recovery moves the job.
        wait_until(
            lambda: min(w.heartbeat_age_seconds for w in admin.list_workers()) > TTL_SECONDS,
            what="both heartbeats older than the TTL",
        )
        assert run(capsys, "worker", "health", "--worker-id", "h:1:a", code=1)
        moved = run_json(capsys, "worker", "failover-recovery")
        assert {e["worker_id"]: e["requeued"] for e in moved} == {"h:1:a": [job_id], "h:2:b": []}  # type: ignore[union-attr,index]
        assert jobs.get_job(job_id).state.value == "queued"
        assert run_json(capsys, "worker", "failover-recovery", "--force") == []
        stats = run_json(capsys, "worker", "stats")
        assert stats["failover_events"] == 2 and stats["workers_active"] == 0  # type: ignore[index]
        assert stats["outcomes"] == {"h:1:a": {"failed_over": 1}}  # type: ignore[index]

        admin.register_worker(fleet.Registration("h:3:c", "h", 3, ("default",), 4, "0.1.0"))
        assert "deregistered h:3:c" in run(capsys, "worker", "deregister", "--worker-id", "h:3:c")
        assert run_json(capsys, "worker", "cleanup-crashed") == {"removed": 2}
        assert run_json(capsys, "worker", "list", "--all") == []
        assert "closed 0" in run(capsys, "queue", "cleanup-orphaned-assignments")
        assert "deleted 1 health" in run(capsys, "queue", "cleanup-health-checks", "--days", "0")
        assert "deleted 3 failover" in run(
            capsys, "queue", "cleanup-failover-events", "--days", "0"
        )
    finally:
        engine.dispose()


def test_validate_and_export_config(
    env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = run_json(capsys, "worker", "validate-config")
    assert checked["ok"] is True and checked["failover_within_seconds"] == TTL_SECONDS + 0.5  # type: ignore[index]
    pool = run_json(capsys, "worker", "validate-pool")
    assert pool["ok"] is True and pool["latency_ms"] >= 0  # type: ignore[index]
    exported = run(capsys, "worker", "export-config")
    assert f"LEDGERQ_WORKER_TTL={TTL_SECONDS}" in exported and "LEDGERQ_DATABASE_URL=" in exported
    # Secrets are masked.
    monkeypatch.setenv("LEDGERQ_API_TOKEN", "s3cret")
    monkeypatch.setenv("LEDGERQ_REDIS_URL", "redis://user:hunter2@host:6379/0")
    exported = run(capsys, "worker", "export-config")
    assert "s3cret" not in exported and "hunter2" not in exported
    assert "LEDGERQ_API_TOKEN=***" in exported
    # Settings that do not fit together fail validation.
    monkeypatch.setenv("LEDGERQ_WORKER_TTL", "0.3")
    bad = run_json(capsys, "worker", "validate-config", code=1)
    assert any("HEARTBEAT_INTERVAL" in p for p in bad["problems"])  # type: ignore[index,union-attr]
    monkeypatch.setenv("LEDGERQ_DB_POOL_SIZE", "2")
    assert run_json(capsys, "worker", "validate-pool", code=1)["ok"] is False  # type: ignore[index]


def test_fleet_command_mistakes_are_one_line_errors(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["worker", "stop", "--worker-id", "ghost"],
        ["worker", "deregister", "--worker-id", "ghost"],
        ["worker", "health", "--worker-id", "ghost"],
    ):
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "ghost" in err and "Traceback" not in err and err.count("\n") == 1
    capsys.readouterr()
    assert main(["queue", "cleanup-health-checks"]) == 2  # --days is required
