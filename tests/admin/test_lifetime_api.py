"""Lifetime figures over HTTP (``/admin/queue/stats``) and on the dashboard's queue table:
enqueued, succeeded and dead since the beginning, unchanged by the retention prune, on every
backend."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from ledgerq.admin.deps import AdminDeps
from ledgerq.admin.timed_cache import TimedCache
from ledgerq.app import wiring
from ledgerq.core.states import JobState
from ledgerq.transport.polling import PollingTransport
from tests.admin.conftest import ADMIN, READ, READ_TOKEN, Served, serve
from tests.helpers import running_worker, wait_until


@pytest.fixture
def short_retention(database_url: str) -> Iterator[Served]:
    """The HTTP application with a retention every finished job is soon past, reading the
    lifetime figures afresh on each request (they are cached for 10 s otherwise)."""
    for served in serve(database_url, retention_succeeded=0.001, retention_failed=0.001):
        deps: AdminDeps = served.http.state.deps
        deps.lifetime = TimedCache(deps.client.store.count_lifetime, ttl_seconds=0)
        yield served


def stats(served: Served) -> dict[str, Any]:
    response = served.client.get("/admin/queue/stats", headers=READ)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_lifetime_figures_survive_the_retention_prune(short_retention: Served) -> None:
    served, app = short_retention, short_retention.app
    for body in ({"task": "admin.add", "args": [1, 2]},) * 3 + ({"task": "admin.boom"},) * 2:
        assert served.client.post("/api/v1/jobs", json=body, headers=ADMIN).status_code == 201
    with running_worker(app, queues=("default", "mail"), poll_interval_seconds=0.05):
        wait_until(
            lambda: (
                len(app.client.list(state=JobState.SUCCEEDED)) == 3
                and len(app.client.list(state=JobState.DEAD)) == 2
            ),
            what="jobs finished",
        )
    before = stats(served)
    queues = {q["name"]: q["lifetime"] for q in before["queues"]}
    add = {"enqueued": 3, "succeeded": 3, "dead": 0, "cancelled": 0, "expired": 0}
    boom = {"enqueued": 2, "succeeded": 0, "dead": 2, "cancelled": 0, "expired": 0}
    assert queues == {
        "default": {**add, "tasks": {"admin.add": add}},
        "mail": {**boom, "tasks": {"admin.boom": boom}},
    }
    assert before["lifetime"] == {
        "enqueued": 5, "succeeded": 3, "dead": 2, "cancelled": 0, "expired": 0
    }  # fmt: skip

    reconciler = wiring.build_reconciler(app.settings, app.parts, PollingTransport())
    wait_until(
        lambda: reconciler.run_once() and app.client.store.count_jobs() == {},
        what="the retention deleted every finished job",
    )
    after = stats(served)
    assert after["totals"]["succeeded"] == after["totals"]["dead"] == 0
    assert {q["name"]: q["lifetime"] for q in after["queues"]} == queues
    assert after["lifetime"] == before["lifetime"]

    client = served.client
    client.post(
        "/dashboard/login",
        content=f"token={READ_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    page = client.get("/dashboard")
    assert page.status_code == 200 and "since start" in page.text
    cells = re.findall(r"<td class='num lifetime'>([^<]*)</td>", page.text)
    assert sorted(cells) == ["2 / 0 / 2", "3 / 3 / 0"]


def test_the_lifetime_figures_are_read_once_per_interval() -> None:
    now = [100.0]
    reads: list[int] = []

    def compute() -> int:
        reads.append(1)
        return len(reads)

    cache = TimedCache(compute, ttl_seconds=10, clock=lambda: now[0])
    assert [cache.get() for _ in range(5)] == [1] * 5
    now[0] += 9.9
    assert cache.get() == 1
    now[0] += 0.2
    assert cache.get() == 2 and len(reads) == 2
