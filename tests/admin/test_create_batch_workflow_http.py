"""Batches and workflows created over HTTP by a producer token, on every backend: stored in
one transaction (or refused whole, naming every bad member or step), run by a worker like
those made in Python, and their jobs readable by the producer that made them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ledgerq import JobContext, LedgerQ
from tests.admin.conftest import READ, Served
from tests.admin.producer_serving import BILLING, CRM, serve_producers


@pytest.fixture
def served(database_url: str) -> Iterator[Served]:
    yield from serve_producers(database_url)


def drain(app: LedgerQ) -> None:
    app.worker(queues=("default", "mail"), burst=True, poll_interval_seconds=0.05).run()


def test_a_batch_over_http_runs_and_fires_its_callback(served: Served) -> None:
    fired: list[int] = []

    @served.app.task(name="admin.batch_done", queue="default")
    def batch_done(ctx: JobContext, batch_id: int) -> None:
        fired.append(batch_id)

    body = {
        "jobs": [
            {"task": "admin.add", "args": [1, 2]},
            {"task": "admin.add", "kwargs": {"a": 3, "b": 4}, "priority": 5},
        ],
        "on_complete": "admin.batch_done",
    }
    created = served.client.post("/api/v1/batches", json=body, headers=BILLING)
    assert created.status_code == 201, created.text
    batch_id, job_ids = created.json()["id"], created.json()["job_ids"]
    assert len(job_ids) == 2
    member = served.client.get(f"/api/v1/jobs/{job_ids[1]}", headers=BILLING).json()
    assert (member["kwargs"], member["priority"], member["producer"]) == (
        {"a": 3, "b": 4},
        5,
        "billing",
    )
    assert served.client.get(f"/api/v1/jobs/{job_ids[0]}", headers=CRM).status_code == 404
    drain(served.app)
    status = served.client.get(f"/api/v1/batches/{batch_id}", headers=READ).json()
    assert (status["finished"], status["counts"]["succeeded"]) == (2, 2)
    assert fired == [batch_id]
    assert [served.app.client.wait(i, timeout=5) for i in job_ids] == [3, 7]


def test_a_bad_batch_stores_nothing(served: Served) -> None:
    body = {
        "jobs": [{"task": "admin.add", "args": [1, 2]}, {"task": "nope"}, {"task": "admin.add"}]
    }
    refused = served.client.post("/api/v1/batches", json=body, headers=BILLING)
    assert refused.status_code == 400, refused.text
    assert [e["index"] for e in refused.json()["errors"]] == [1, 2]
    callback = {"jobs": [{"task": "admin.add", "args": [1, 2]}], "on_success": "admin.add"}
    bad_callback = served.client.post("/api/v1/batches", json=callback, headers=BILLING)
    assert bad_callback.status_code == 400
    assert "batch_id" in bad_callback.json()["detail"]
    assert served.app.client.list() == []


def test_a_workflow_over_http_runs_its_steps_in_order(served: Served) -> None:
    @served.app.task(name="admin.total", queue="default")
    def total(ctx: JobContext, upstream: dict[str, Any]) -> int:
        return sum(upstream.values())

    body = {
        "name": "nightly-report",
        "steps": [
            {"name": "left", "task": "admin.add", "args": [1, 2]},
            {"name": "right", "task": "admin.add", "args": [3, 4]},
            {"name": "sum", "task": "admin.total", "after": ["left", "right"]},
        ],
    }
    created = served.client.post("/api/v1/workflows", json=body, headers=BILLING)
    assert created.status_code == 201, created.text
    view = created.json()
    assert (view["name"], view["state"], view["steps_total"]) == ("nightly-report", "running", 3)
    steps = {s["name"]: s for s in view["steps"]}
    assert steps["sum"]["state"] == "waiting" and steps["sum"]["depends_on"] == ["left", "right"]
    left = served.client.get(f"/api/v1/jobs/{steps['left']['job_id']}", headers=BILLING)
    assert left.status_code == 200 and left.json()["producer"] == "billing"
    drain(served.app)
    drain(served.app)  # the last step is queued once its dependencies finished
    done = served.app.workflows.wait(view["id"], timeout=10)
    assert done.state.value == "succeeded"
    last = next(s for s in done.steps if s.name == "sum")
    assert last.job_id is not None
    # A later step's job records the producer too, so it may read that one as well.
    final = served.client.get(f"/api/v1/jobs/{last.job_id}", headers=BILLING)
    assert final.status_code == 200, final.text
    assert final.json()["result"] == 10


def test_a_bad_workflow_stores_nothing(served: Served) -> None:
    body = {
        "name": "broken",
        "steps": [
            {"name": "a", "task": "admin.add", "args": [1, 2]},
            {"name": "b", "task": "nope"},
            {"name": "c", "task": "admin.add", "args": [1, 2], "after": ["zzz"]},
        ],
    }
    refused = served.client.post("/api/v1/workflows", json=body, headers=BILLING)
    assert refused.status_code == 400, refused.text
    assert [e["index"] for e in refused.json()["errors"]] == [1, 2]
    policy = {**body, "on_failure": "sometimes"}
    assert served.client.post("/api/v1/workflows", json=policy, headers=BILLING).status_code == 422
    assert served.app.workflows.list() == [] and served.app.client.list() == []
