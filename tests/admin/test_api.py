"""The admin HTTP API against real databases: enqueue, idempotency, get, cancel, retry, pause,
stats, workers and health."""

from __future__ import annotations

from ledgerq.core.states import JobState
from tests.admin.conftest import ADMIN, READ, Served


def _enqueue(served: Served, body: dict[str, object], **headers: str) -> dict[str, object]:
    response = served.client.post("/api/v1/jobs", json=body, headers={**ADMIN, **headers})
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def test_enqueue_get_cancel_retry(served: Served) -> None:
    created = served.client.post(
        "/api/v1/jobs",
        json={"task": "admin.add", "args": [1, 2], "kwargs": {"password": "hunter2"}},
        headers=ADMIN,
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert served.app.client.get(job_id).state is JobState.QUEUED  # really in the ledger

    got = served.client.get(f"/api/v1/jobs/{job_id}", headers=READ).json()
    assert got["task"] == "admin.add" and got["args"] == [1, 2] and got["state"] == "queued"
    assert got["kwargs"] == {"password": "***"}  # secrets never leave the server
    assert "hunter2" not in served.client.get("/api/v1/jobs", headers=READ).text

    cancelled = served.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = served.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    retried = served.client.post(f"/api/v1/jobs/{job_id}/retry", headers=ADMIN)
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    assert served.app.client.get(job_id).state is JobState.QUEUED

    missing = served.client.get("/api/v1/jobs/999999", headers=READ)
    assert missing.status_code == 404 and "999999" in missing.json()["detail"]


def test_idempotency_key_returns_the_same_job(served: Served) -> None:
    body = {"task": "admin.add", "args": [2, 3]}
    first = _enqueue(served, body, **{"Idempotency-Key": "order-7"})
    second = served.client.post(
        "/api/v1/jobs", json=body, headers={**ADMIN, "Idempotency-Key": "order-7"}
    )
    assert second.status_code == 200
    assert second.json()["id"] == first["id"] and second.json()["replayed"] is True
    # Still the same job after it finished (the dedupe key alone would not do that).
    served.app.client.cancel(int(str(first["id"])))
    third = _enqueue(served, body, **{"Idempotency-Key": "order-7"})
    assert third["id"] == first["id"]
    conflict = served.client.post(
        "/api/v1/jobs",
        json={"task": "admin.add", "args": [9, 9]},
        headers={**ADMIN, "Idempotency-Key": "order-7"},
    )
    assert conflict.status_code == 409
    assert len(served.app.client.list(task="admin.add")) == 1


def test_bad_requests_are_4xx_and_store_nothing(served_sqlite: Served) -> None:
    client = served_sqlite.client
    cases = [
        ({"task": "no.such.task"}, 400),
        ({"task": "admin.add", "queue": "bad queue!"}, 422),
        ({"task": "admin.add", "delay": -1}, 422),
        ({"task": "admin.add", "args": "not a list"}, 422),
        ({"task": "admin.add", "unknown_field": 1}, 422),
        ({"task": "admin.boom", "kwargs": {"nope": 1}}, 400),
        ({"task": "admin.boom", "args": ["a", "b"]}, 400),
        ({"task": "admin.add", "run_at": "2999-01-01T00:00:00Z"}, 400),
        ({"task": "admin.add", "run_at": "2030-01-01T00:00:00"}, 400),
    ]
    for body, status in cases:
        response = client.post("/api/v1/jobs", json=body, headers=ADMIN)
        assert response.status_code == status, (body, response.text)
        assert "detail" in response.json()
    raw = client.post(
        "/api/v1/jobs",
        content=b"{not json",
        headers={**ADMIN, "Content-Type": "application/json"},
    )
    assert raw.status_code == 422
    huge = client.post(
        "/api/v1/jobs",
        json={"task": "admin.add", "args": ["x" * 2_000_000]},
        headers=ADMIN,
    )
    assert huge.status_code == 413
    assert client.get("/api/v1/jobs/0", headers=READ).status_code == 422
    assert served_sqlite.app.client.list() == []


def test_pause_stops_claims_and_resume_restarts_them(served: Served) -> None:
    job_id = _enqueue(served, {"task": "admin.add", "args": [1, 1]})["id"]
    paused = served.client.post("/admin/queues/default/pause", headers=ADMIN)
    assert paused.status_code == 200 and paused.json() == {"queue": "default", "paused": True}
    store = served.app.client.store
    claim = {"worker_id": "w1", "limit": 10, "lease_seconds": 30.0}
    assert store.claim_jobs(queues=["default"], **claim) == []
    assert store.claim_jobs(queues=["default", "mail"], **claim) == []
    stats = served.client.get("/admin/queue/stats", headers=READ).json()
    default = next(q for q in stats["queues"] if q["name"] == "default")
    assert default["paused"] is True and default["queued"] == 1
    assert served.client.post("/admin/queues/default/pause", headers=ADMIN).status_code == 200

    assert served.client.post("/admin/queues/default/resume", headers=ADMIN).status_code == 200
    claimed = store.claim_jobs(queues=["default", "mail"], **claim)
    assert [j.id for j in claimed] == [job_id]


def test_workers_come_from_the_registry(served: Served) -> None:
    from ledgerq.core.fleet import Registration

    fleet = served.app.parts.fleet
    assert served.client.get("/admin/queue/workers", headers=READ).json()["workers"] == []
    fleet.register_worker(Registration("h:1:a", "h", 1, ("default", "mail"), 4, "test"))
    fleet.register_worker(Registration("h:2:b", "h", 2, ("default",), 2, "test"))
    fleet.deregister_worker("h:2:b")
    workers = served.client.get("/admin/queue/workers", headers=READ).json()
    assert workers["source"] == "registry"
    [one] = workers["workers"]
    assert (one["worker_id"], one["status"], one["queues"]) == (
        "h:1:a",
        "active",
        ["default", "mail"],
    )
    assert one["heartbeat_age_seconds"] is not None and one["heartbeat_age_seconds"] < 60
    snapshot = served.client.get("/admin/metrics", headers=READ).json()
    assert snapshot["workers_active"] == 1


def test_stats_and_metrics_snapshot_match_the_ledger(served: Served) -> None:
    for n in range(3):
        _enqueue(served, {"task": "admin.add", "args": [n, n]})
    _enqueue(served, {"task": "admin.boom"})
    stats = served.client.get("/admin/queue/stats", headers=READ).json()
    by_name = {q["name"]: q for q in stats["queues"]}
    assert by_name["default"]["queued"] == 3 and by_name["mail"]["queued"] == 1
    assert stats["totals"]["queued"] == 4
    snapshot = served.client.get("/admin/metrics", headers=READ).json()
    assert snapshot["queue_lengths"] == {"default": 3, "mail": 1}
    assert snapshot["finished_total"] == 0 and snapshot["workers_active"] == 0


def test_health_needs_no_token_and_checks_the_database(served: Served) -> None:
    assert served.client.get("/health/live").json()["status"] == "ok"
    ready = served.client.get("/health/ready")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ok", "checks": {}}  # details only with a token
    checks = served.client.get("/health/ready", headers=READ).json()["checks"]
    assert checks["database"]["ok"] and checks["migrations"]["ok"]
    assert served.client.get("/health").status_code == 200
