"""``/api/v1/workflows`` over a real ledger: list and show as ``ledgerq workflow`` does, cancel
cascades to every unfinished step, retry continues a broken workflow, mistakes are 4xx; and the
schedule, batch and workflow endpoints are in the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from ledgerq import JobContext
from tests.admin.conftest import ADMIN, READ, Served


@pytest.fixture
def workflow_id(served: Served) -> str:
    """A workflow a -> b -> c whose first step waits on a queue no worker serves."""

    @served.app.task(name="admin.step", queue="parked")
    def step(ctx: JobContext, upstream: dict[str, Any] | None = None) -> None:
        return None

    flow = served.app.workflow("nightly-report")
    a = flow.step(step.s(), name="a")
    b = flow.step(step.s(), after=[a], name="b")
    flow.step(step.s(), after=[b], name="c")
    return flow.enqueue()


def shown(served: Served, workflow_id: str) -> dict[str, Any]:
    response = served.client.get(f"/api/v1/workflows/{workflow_id}", headers=READ)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def steps_of(body: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {s["name"]: (s["state"], s["job_state"]) for s in body["steps"]}


def test_list_show_cancel_cascades_and_retry(served: Served, workflow_id: str) -> None:
    client = served.client
    listed = client.get("/api/v1/workflows", headers=READ).json()["workflows"]
    assert [(w["id"], w["name"], w["state"]) for w in listed] == [
        (workflow_id, "nightly-report", "running")
    ]
    assert (listed[0]["steps_total"], listed[0]["steps_done"], listed[0]["steps"]) == (3, 0, [])

    body = shown(served, workflow_id)
    assert (body["on_failure"], body["finished_at"]) == ("stop", None)
    assert {s["name"]: s["depends_on"] for s in body["steps"]} == {
        "a": [],
        "b": ["a"],
        "c": ["b"],
    }
    assert steps_of(body) == {
        "a": ("queued", "queued"),
        "b": ("waiting", None),
        "c": ("waiting", None),
    }
    first_job = next(s["job_id"] for s in body["steps"] if s["name"] == "a")
    assert client.get(f"/api/v1/jobs/{first_job}", headers=READ).json()["task"] == "admin.step"

    cancelled = client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert {state for state, _ in steps_of(cancelled.json()).values()} == {"cancelled"}
    assert client.get(f"/api/v1/jobs/{first_job}", headers=READ).json()["state"] == "cancelled"
    by_state = client.get("/api/v1/workflows?state=cancelled", headers=READ).json()["workflows"]
    assert [w["id"] for w in by_state] == [workflow_id]
    assert client.get("/api/v1/workflows?state=running", headers=READ).json()["workflows"] == []
    again = client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=ADMIN)
    assert again.status_code == 409 and "cannot be cancelled" in again.json()["detail"]

    retried = client.post(f"/api/v1/workflows/{workflow_id}/retry", headers=ADMIN)
    assert retried.status_code == 200, retried.text
    assert retried.json()["state"] == "running"
    assert steps_of(shown(served, workflow_id)) == {
        "a": ("queued", "queued"),
        "b": ("waiting", None),
        "c": ("waiting", None),
    }
    nothing = client.post(f"/api/v1/workflows/{workflow_id}/retry", headers=ADMIN)
    assert nothing.status_code == 409 and "no failed or cancelled step" in nothing.json()["detail"]


def test_unknown_ids_malformed_queries_and_tokens(served: Served, workflow_id: str) -> None:
    client = served.client
    expected = {"detail": "no workflow with id 'no-such-workflow'"}
    for method, suffix in (("get", ""), ("post", "/cancel"), ("post", "/retry")):
        response = client.request(
            method, f"/api/v1/workflows/no-such-workflow{suffix}", headers=ADMIN
        )
        assert (response.status_code, response.json()) == (404, expected), suffix
    for query in ("state=bogus", "limit=0", "limit=1001", "limit=many"):
        assert client.get(f"/api/v1/workflows?{query}", headers=READ).status_code == 422, query
    assert client.get(f"/api/v1/workflows/{'x' * 65}", headers=READ).status_code == 422
    assert client.get("/api/v1/workflows/%00", headers=READ).status_code == 422

    assert client.get("/api/v1/workflows").status_code == 401
    assert client.get(f"/api/v1/workflows/{workflow_id}").status_code == 401
    for action in ("cancel", "retry"):
        assert client.post(f"/api/v1/workflows/{workflow_id}/{action}").status_code == 401
        refused = client.post(f"/api/v1/workflows/{workflow_id}/{action}", headers=READ)
        assert refused.status_code == 403
    assert shown(served, workflow_id)["state"] == "running"  # nothing was changed


def test_schedules_batches_and_workflows_are_in_the_openapi_document(served_sqlite: Served) -> None:
    document = served_sqlite.client.get("/openapi.json", headers=READ).json()
    expected = {
        "/admin/schedules": {"get", "post"},
        "/admin/schedules/{name}": {"delete"},
        "/admin/schedules/{name}/runs": {"get"},
        "/admin/schedules/{name}/pause": {"post"},
        "/admin/schedules/{name}/resume": {"post"},
        "/api/v1/batches": {"get", "post"},
        "/api/v1/batches/{batch_id}": {"get"},
        "/api/v1/batches/{batch_id}/retry-failed": {"post"},
        "/api/v1/jobs/bulk": {"post"},
        "/api/v1/workflows": {"get", "post"},
        "/api/v1/workflows/{workflow_id}": {"get"},
        "/api/v1/workflows/{workflow_id}/cancel": {"post"},
        "/api/v1/workflows/{workflow_id}/retry": {"post"},
    }
    for path, methods in expected.items():
        assert set(document["paths"][path]) == methods, path
        for method in methods:
            operation = document["paths"][path][method]
            assert operation["security"], (method, path)  # the bearer token is declared
            ok = next(code for code in operation["responses"] if code.startswith("2"))
            if ok != "204":
                assert "$ref" in str(operation["responses"][ok]["content"]), (method, path)
    for model in ("ScheduleOut", "ScheduleIn", "RunsOut", "BatchOut", "WorkflowOut", "StepOut"):
        assert model in document["components"]["schemas"], model
