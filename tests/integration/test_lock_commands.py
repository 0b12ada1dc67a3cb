"""``ledgerq queue list-locks|clear-stale-locks`` against SQLite, PostgreSQL and MariaDB: owner
liveness from the worker registry (or, for other owners, the lease), and stale locks released
with their fencing counters kept."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.cli.main import main
from ledgerq.core.fleet import Registration
from ledgerq.store.tables import queue_workers
from tests.helpers import wait_until
from tests.redis_server import RedisServer


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    made = LedgerQ(database_url=database_url)
    yield made
    made.close()


def run_json(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(["--database-url", url, "--json", "queue", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_and_clear_stale_locks(
    app: LedgerQ, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = app.parts.fleet
    fleet.register_worker(Registration("h:1:live", "h", 1, ("default",), 1, "t"))
    fleet.register_worker(Registration("h:2:gone", "h", 2, ("default",), 1, "t"))
    with app.parts.store.engine.begin() as conn:
        conn.execute(
            sa.update(queue_workers).where(queue_workers.c.id == "h:2:gone").values(state="dead")
        )
    locks = app.locks
    live = locks.acquire("by-live-worker", ttl=60, owner="h:1:live")
    dead = locks.acquire("by-dead-worker", ttl=60, owner="h:2:gone")
    fresh = locks.acquire("by-process", ttl=60, owner="host:99")
    expired = locks.acquire("expired", ttl=0.3, owner="host:98")
    assert live and dead and fresh and expired

    def listed() -> dict[str, Any]:
        return {r["name"]: r for r in run_json(database_url, capsys, "list-locks")}

    rows = wait_until(lambda: (r := listed()) and r["expired"]["stale"] and r, what="expiry")
    assert set(rows) == {"by-live-worker", "by-dead-worker", "by-process", "expired"}
    assert rows["by-live-worker"]["owner_alive"] and not rows["by-live-worker"]["stale"]
    assert not rows["by-dead-worker"]["owner_alive"] and rows["by-dead-worker"]["stale"]
    assert rows["by-process"]["owner_alive"] and not rows["by-process"]["stale"]
    assert not rows["expired"]["owner_alive"] and rows["expired"]["expires_in_seconds"] <= 0
    assert rows["by-dead-worker"]["token"] == dead.token
    assert rows["by-process"]["age_seconds"] >= 0
    stale_only = run_json(database_url, capsys, "list-locks", "--stale")
    assert sorted(r["name"] for r in stale_only) == ["by-dead-worker", "expired"]

    cleared = run_json(database_url, capsys, "clear-stale-locks")
    assert cleared["cleared"] == 2
    assert sorted(r["name"] for r in cleared["locks"]) == ["by-dead-worker", "expired"]
    assert set(listed()) == {"by-live-worker", "by-process"}
    again = locks.acquire("by-dead-worker", ttl=60)  # free now, and its counter kept growing
    assert again is not None and again.token > dead.token
    assert run_json(database_url, capsys, "clear-stale-locks")["cleared"] == 0


def test_the_human_output_shows_a_table_and_counts(
    make_database_url: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    database_url = make_database_url("sqlite")
    app = LedgerQ(database_url=database_url)
    assert main(["--database-url", database_url, "queue", "list-locks"]) == 0
    assert "no locks held" in capsys.readouterr().out
    assert app.locks.acquire("nightly-report", ttl=60, owner="host:7") is not None
    assert main(["--database-url", database_url, "queue", "list-locks"]) == 0
    out = capsys.readouterr().out
    assert "nightly-report" in out and "host:7" in out
    assert main(["--database-url", database_url, "queue", "clear-stale-locks"]) == 0
    assert "cleared 0 stale lock(s)" in capsys.readouterr().out
    app.close()


def test_clearing_a_stale_redis_lock_frees_its_key_too(
    make_database_url: Callable[[str], str],
    redis_server: RedisServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``LOCKS_BACKEND=redis`` the lock is the Redis key: clearing a dead worker's lock
    deletes its key at once (not when its TTL ends), and leaves a live holder's key alone."""
    database_url = make_database_url("sqlite")
    monkeypatch.setenv("LEDGERQ_LOCKS_BACKEND", "redis")
    monkeypatch.setenv("LEDGERQ_REDIS_URL", redis_server.url)
    app = LedgerQ(database_url=database_url)
    try:
        fleet = app.parts.fleet
        fleet.register_worker(Registration("h:1:live", "h", 1, ("default",), 1, "t"))
        fleet.register_worker(Registration("h:2:gone", "h", 2, ("default",), 1, "t"))
        with app.parts.store.engine.begin() as conn:
            conn.execute(
                sa.update(queue_workers)
                .where(queue_workers.c.id == "h:2:gone")
                .values(state="dead")
            )
        dead = app.locks.acquire("report", ttl=600, owner="h:2:gone")
        live = app.locks.acquire("billing", ttl=600, owner="h:1:live")
        assert dead is not None and live is not None
        assert app.locks.acquire("report", ttl=60) is None  # the key holds it for 10 minutes

        cleared = run_json(database_url, capsys, "clear-stale-locks")
        again = app.locks.acquire("report", ttl=60)  # free at once
        assert again is not None and again.token > dead.token
        assert (cleared["cleared"], cleared["keys_deleted"]) == (1, 1)
        assert [r["name"] for r in cleared["locks"]] == ["report"]
        assert app.locks.acquire("billing", ttl=60) is None  # the live holder keeps its key
        assert redis_server.client().exists(f"{app.settings.namespace}:0:lock:billing") == 1

        # Redis down: nothing is cleared, so a run once it is back still finds the record.
        with app.parts.store.engine.begin() as conn:
            conn.execute(
                sa.update(queue_workers)
                .where(queue_workers.c.id == "h:1:live")
                .values(state="dead")
            )
        redis_server.kill()
        assert main(["--database-url", database_url, "queue", "clear-stale-locks"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: Redis locks:") and "Traceback" not in err
        assert [r["name"] for r in run_json(database_url, capsys, "list-locks", "--stale")] == [
            "billing"
        ]
        redis_server.start()  # empty: the key went with the server
        after = run_json(database_url, capsys, "clear-stale-locks")
        assert (after["cleared"], after["keys_deleted"]) == (1, 0)
    finally:
        app.close()
