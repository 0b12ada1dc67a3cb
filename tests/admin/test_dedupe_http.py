"""``POST /api/v1/jobs`` with ``dedupe_for``: a duplicate within the window returns the first
job (200, ``duplicate: true``), even once it finished; bad windows are 4xx."""

from __future__ import annotations

from tests.admin.conftest import ADMIN, Served


def test_a_dedupe_window_over_http(served_sqlite: Served) -> None:
    client = served_sqlite.client
    body = {"task": "admin.add", "args": [1, 2], "dedupe_key": "nightly", "dedupe_for": 3600}
    first = client.post("/api/v1/jobs", json=body, headers=ADMIN)
    assert first.status_code == 201 and first.json()["duplicate"] is False
    job_id = first.json()["id"]
    served_sqlite.app.client.cancel(job_id)  # finished: only the window holds the key now
    again = client.post("/api/v1/jobs", json=body, headers=ADMIN)
    assert again.status_code == 200
    assert again.json()["id"] == job_id and again.json()["duplicate"] is True
    assert len(served_sqlite.app.client.list(task="admin.add")) == 1

    no_key = client.post(
        "/api/v1/jobs", json={"task": "admin.add", "dedupe_for": 60}, headers=ADMIN
    )
    assert no_key.status_code == 400 and "dedupe_key" in no_key.json()["detail"]
    for bad in (0, -5, 10**9, "soon"):
        response = client.post(
            "/api/v1/jobs",
            json={"task": "admin.add", "dedupe_key": "k", "dedupe_for": bad},
            headers=ADMIN,
        )
        assert response.status_code == 422, bad
    assert len(served_sqlite.app.client.list(task="admin.add")) == 1
