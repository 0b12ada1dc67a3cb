"""``GET /admin/queue/locks`` (read token, like the other /admin views) and the
``distributed_locks_held`` gauge on ``/metrics``."""

from __future__ import annotations

from ledgerq.core.fleet import Registration
from tests.admin.conftest import ADMIN, READ, Served
from tests.admin.test_metrics import samples
from tests.helpers import wait_until


def test_locks_endpoint_and_gauge(served_sqlite: Served) -> None:
    app, client = served_sqlite.app, served_sqlite.client
    assert client.get("/admin/queue/locks").status_code == 401
    assert client.get("/admin/queue/locks", headers=READ).json() == {"locks": []}

    app.parts.fleet.register_worker(Registration("h:1:w", "h", 1, ("default",), 1, "t"))
    held = app.locks.acquire("by-worker", ttl=60, owner="h:1:w")
    short = app.locks.acquire("short", ttl=0.2, owner="host:5")
    assert held is not None and short is not None

    def listed() -> dict[str, dict[str, object]]:
        body = client.get("/admin/queue/locks", headers=ADMIN).json()
        return {lock["name"]: lock for lock in body["locks"]}

    locks = wait_until(lambda: (r := listed()) and r["short"]["stale"] and r, what="expiry")
    assert locks["by-worker"]["owner"] == "h:1:w" and locks["by-worker"]["token"] == held.token
    assert locks["by-worker"]["owner_alive"] is True and locks["by-worker"]["stale"] is False
    assert locks["short"]["owner_alive"] is False
    scraped = samples(client.get("/metrics", headers=READ).text)
    assert scraped[("distributed_locks_held", ())] == 1
    held.release()
    scraped = samples(client.get("/metrics", headers=READ).text)
    assert scraped[("distributed_locks_held", ())] == 0
