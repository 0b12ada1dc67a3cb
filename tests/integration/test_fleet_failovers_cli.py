"""``worker failovers`` and ``GET /admin/failover-events`` list the failover record; ``worker
stop`` is graceful by default (``--immediate`` skips the grace) and addresses this host's
workers with ``--this-host``; ``worker health --self`` checks this host's workers and
``--port`` a local health port: on every backend, in-process."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from ledgerq.cli.commands.serve_cmd import build_http
from ledgerq.cli.main import main
from ledgerq.core import fleet
from ledgerq.core.job import NewJob
from ledgerq.metrics.exporter import HealthExporter
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from tests.admin.conftest import ADMIN, READ
from tests.admin.tasks_app import make_app
from tests.helpers import wait_until
from tests.redis_server import free_port

HERE = socket.gethostname()
TTL_SECONDS = 3.0


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("LEDGERQ_WORKER_TTL", str(TTL_SECONDS))
    monkeypatch.setenv("LEDGERQ_HEARTBEAT_INTERVAL", "0.2")
    return database_url


@pytest.fixture
def fleet_store(env: str) -> Iterator[SqlFleetAdmin]:
    engine = create_engine(env)
    yield SqlFleetAdmin(engine)
    engine.dispose()


def run(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    capsys.readouterr()
    assert main(list(argv)) == code, capsys.readouterr()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out if code == 0 else captured.out + captured.err


def register(store: SqlFleetAdmin, worker_id: str, host: str) -> None:
    store.register_worker(fleet.Registration(worker_id, host, 1, ("default",), 2, "0.1.0"))


def test_failovers_are_listed_by_the_cli_and_over_http(
    env: str, fleet_store: SqlFleetAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = SqlJobStore(fleet_store.registry.engine)
    register(fleet_store, "h:1:dead", HERE)
    ids = [r.job_id for r in jobs.insert_jobs([NewJob("t", "default", "[]")] * 2)]
    jobs.claim_jobs(queues=["default"], worker_id="h:1:dead", limit=2, lease_seconds=60)
    assert json.loads(run(capsys, "--json", "worker", "failovers")) == []
    assert "failover events" in run(capsys, "worker", "failovers")
    wait_until(
        lambda: fleet_store.list_workers()[0].heartbeat_age_seconds > TTL_SECONDS,
        what="the heartbeat older than the TTL",
    )
    fleet_store.fail_over_workers(ttl_seconds=TTL_SECONDS, detected_by="test")

    (event,) = json.loads(run(capsys, "worker", "failovers", "--json"))
    assert event["worker_id"] == "h:1:dead" and event["detected_by"] == "test"
    assert (event["jobs_requeued"], event["jobs_dead"]) == (2, 0)
    assert event["job_ids"] == {"requeued": ids, "dead": []} and event["duration_ms"] >= 0
    shown = run(capsys, "worker", "failovers", "--limit", "5")
    assert "h:1:dead" in shown and " ms" in shown
    assert run(capsys, "worker", "failovers", "--limit", "0", code=2)

    app = make_app(database_url=env)
    http = build_http(
        app, admin_tokens=[ADMIN["Authorization"][7:]], read_tokens=[READ["Authorization"][7:]]
    )
    with TestClient(http, base_url="http://127.0.0.1") as client:
        assert client.get("/admin/failover-events").status_code == 401
        got = client.get("/admin/failover-events?limit=10", headers=READ)
        assert got.status_code == 200, got.text
        (listed,) = got.json()["events"]
        assert listed["worker_id"] == "h:1:dead" and listed["job_ids"]["requeued"] == ids
        assert listed["jobs_requeued"] == 2 and listed["duration_ms"] >= 0
        assert client.get("/admin/failover-events?limit=0", headers=READ).status_code == 422
        mine = client.get("/admin/failover-events?worker_id=h:1:dead", headers=READ).json()
        assert [e["id"] for e in mine["events"]] == [listed["id"]]
        other = client.get("/admin/failover-events?worker_id=h:2:alive", headers=READ).json()
        assert other == {"events": []}
    app.close()


def test_stop_is_graceful_by_default_and_reaches_this_hosts_workers(
    env: str, fleet_store: SqlFleetAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    register(fleet_store, "here:1:a", HERE)
    register(fleet_store, "here:2:b", HERE)
    register(fleet_store, "there:1:c", "another-host")

    def asked() -> dict[str, str | None]:
        return {
            w.worker_id: w.stop_requested.value if w.stop_requested else None
            for w in fleet_store.list_workers()
        }

    assert "stop (graceful) requested for here:1:a" in run(
        capsys, "worker", "stop", "--worker-id", "here:1:a"
    )
    assert asked() == {"here:1:a": "graceful", "here:2:b": None, "there:1:c": None}
    done = json.loads(run(capsys, "--json", "worker", "stop", "--this-host", "--immediate"))
    assert done == {"stop_requested": ["here:1:a", "here:2:b"], "mode": "immediate"}
    assert asked() == {"here:1:a": "immediate", "here:2:b": "immediate", "there:1:c": None}
    assert json.loads(run(capsys, "--json", "worker", "stop-all")) == {
        "stop_requested": 3,
        "mode": "graceful",
    }
    for argv, says in (
        (["worker", "stop"], "--this-host"),
        (["worker", "stop", "--worker-id", "x", "--this-host"], "--this-host"),
        (["worker", "stop", "--worker-id", "x", "--graceful", "--immediate"], "contradict"),
    ):
        assert says in run(capsys, *argv, code=2)


def test_health_self_checks_this_hosts_workers_only(
    env: str, fleet_store: SqlFleetAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no active workers on this host" in run(capsys, "worker", "health", "--self", code=1)
    register(fleet_store, "there:1:c", "another-host")  # never heartbeats again: stale
    register(fleet_store, "here:1:a", HERE)
    wait_until(
        lambda: fleet_store.list_workers()[0].heartbeat_age_seconds > TTL_SECONDS,
        what="the other host's heartbeat older than the TTL",
    )
    fleet_store.heartbeat_worker("here:1:a", fleet.Pulse(0, 0, 0.1))
    report = json.loads(run(capsys, "--json", "worker", "health", "--self"))
    assert report["healthy"] is True and list(report["workers"]) == ["here:1:a"]
    assert run(capsys, "worker", "health", code=1)  # the whole fleet is not healthy
    assert "give one of" in run(capsys, "worker", "health", "--self", "--port", "80", code=2)


def test_health_port_asks_a_local_worker(capsys: pytest.CaptureFixture[str]) -> None:
    alive = {"now": True}
    exporter = HealthExporter(
        host="127.0.0.1", port=0, is_alive=lambda: alive["now"], render=lambda: (b"", "text/plain")
    )
    exporter.start()
    try:
        port = str(exporter.port)
        # Without readiness checks of its own, the exporter's /health/ready follows liveness.
        assert "healthy: /health/ready answered 200" in run(
            capsys, "worker", "health", "--port", port
        )
        alive["now"] = False
        assert "answered 503" in run(capsys, "worker", "health", "--port", port, code=1)
    finally:
        exporter.stop()
    closed = json.loads(
        run(
            capsys,
            "--json",
            "worker",
            "health",
            "--port",
            str(free_port()),
            "--timeout",
            "1",
            code=1,
        )
    )
    assert closed["healthy"] is False and "did not answer" in closed["answer"]
