"""``LEDGERQ_DATABASE_READ_URL``: the dashboard's and the admin API's listings and stats and
``ledgerq queue stats`` read a streaming standby, everything that writes (an enqueue over
HTTP, a worker's claims and completions) goes to the primary. A private primary and standby
(the shared server is never touched); the standby's replay is paused, so what each surface
shows tells which server it read."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledgerq.app.wiring import READ_APPLICATION_NAME
from ledgerq.cli.commands.serve_cmd import build_http
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.acceptance import effects_app
from tests.acceptance.conftest import Procs
from tests.acceptance.private_servers import PrivatePostgres, streaming_pair
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

TOKEN = "read-replica-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
APP = "tests.acceptance.effects_app:app"


@pytest.fixture
def pair() -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    with streaming_pair() as servers:
        yield servers


def queued(server: PrivatePostgres) -> int:
    """Queued jobs on ``server``; -1 while a standby has not replayed the ledger's tables."""
    try:
        done = server.sql("SELECT count(*) FROM jobs WHERE state = 'queued'", database="ledger")
    except subprocess.CalledProcessError:
        return -1
    return int(done)


def sessions(server: PrivatePostgres) -> list[str]:
    """``application_name`` of the sessions on the ``ledger`` database of ``server``."""
    names = server.sql("SELECT application_name FROM pg_stat_activity WHERE datname = 'ledger'")
    return names.splitlines()


def test_listings_and_stats_read_the_replica_and_writes_go_to_the_primary(
    pair: tuple[PrivatePostgres, PrivatePostgres], tmp_path: Path
) -> None:
    primary, standby = pair
    primary_url = f"postgresql://postgres@127.0.0.1:{primary.port}/ledger"
    # Trust authentication takes any password: this one must never be shown.
    replica_url = f"postgresql://postgres:replica-pw@127.0.0.1:{standby.port}/ledger"
    engine = create_engine(primary_url)
    migrate(engine)
    engine.dispose()
    made = effects_app.make_app(database_url=primary_url, database_read_url=replica_url)
    procs = Procs(tmp_path)
    try:
        made.noop.enqueue_many([(n,) for n in range(3)])
        wait_until(lambda: queued(standby) == 3, timeout=30, what="the standby replaying")
        standby.sql("SELECT pg_wal_replay_pause()")
        wait_until(
            lambda: standby.sql("SELECT pg_get_wal_replay_pause_state()") == "paused",
            timeout=30,
            what="replay paused",
        )
        http = build_http(made.app, admin_tokens=[TOKEN], read_tokens=[])
        with TestClient(http, base_url="http://127.0.0.1") as client:
            # Writes go to the primary: the standby is read-only and would refuse them.
            posted = client.post(
                "/api/v1/jobs", json={"task": effects_app.NOOP, "args": [9]}, headers=AUTH
            )
            assert posted.status_code == 201, posted.text
            new_id = posted.json()["id"]
            made.noop.enqueue_many([(n,) for n in range(3)])
            assert queued(primary) == 7
            # Listings and stats show the standby's paused view ...
            stats = client.get("/admin/queue/stats", headers=AUTH).json()
            assert [(q["name"], q["queued"]) for q in stats["queues"]] == [("default", 3)]
            listed = client.get("/api/v1/jobs", params={"state": "queued"}, headers=AUTH)
            assert len(listed.json()["jobs"]) == 3
            assert new_id not in {j["id"] for j in listed.json()["jobs"]}
            assert client.get("/admin/metrics", headers=AUTH).json()["totals"]["queued"] == 3
            client.post(
                "/dashboard/login",
                content=f"token={TOKEN}".encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            page = client.get("/dashboard/jobs", params={"state": "queued"})
            assert page.status_code == 200, page.text
            assert page.text.count("<tr data-job-id=") == 3
            # ... but a job read by id comes from the primary: a client sees what it enqueued.
            assert client.get(f"/api/v1/jobs/{new_id}", headers=AUTH).status_code == 200
            assert READ_APPLICATION_NAME in sessions(standby)
            assert READ_APPLICATION_NAME not in sessions(primary)

        env = {"LEDGERQ_DATABASE_READ_URL": replica_url}
        shown = procs.run(primary_url, "queue", "stats", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["default"]["queued"] == 3
        config = procs.run(primary_url, "config", "show", "--json", env=env)
        assert "replica-pw" not in config.stdout + config.stderr
        assert json.loads(config.stdout)["database_read_url"].endswith(
            f":***@127.0.0.1:{standby.port}/ledger"
        )
        checked = procs.run(primary_url, "worker", "validate-config", "--json", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr

        # A worker with the read URL set claims and completes on the primary.
        worker = procs.run(primary_url, "worker", "start", "--burst", env=env, app=APP)
        assert worker.returncode == 0, worker.stderr
        done = "SELECT count(*) FROM jobs WHERE state = 'succeeded'"
        assert primary.sql(done, database="ledger") == "7"
        assert standby.sql(done, database="ledger") == "0"  # still paused

        standby.sql("SELECT pg_wal_replay_resume()")
        wait_until(
            lambda: (
                json.loads(procs.run(primary_url, "queue", "stats", "--json", env=env).stdout)[
                    "default"
                ].get("succeeded")
                == 7
            ),
            timeout=30,
            what="the replica catching up",
            interval=0.2,
        )
    finally:
        procs.kill_all()
        made.app.close()
