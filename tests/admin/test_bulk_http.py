"""``POST /api/v1/jobs/bulk`` on every backend: many jobs in one transaction with a result per
item, all or nothing (400 naming every bad item), ``Idempotency-Key`` replays that create
nothing, and bounds on jobs and bytes per request."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from ledgerq.admin.server import AdminServer
from ledgerq.cli.commands.serve_cmd import build_http
from tests.admin.conftest import ADMIN, ADMIN_TOKEN, READ_TOKEN, Served
from tests.admin.producer_serving import BILLING, PRODUCERS, serve_producers
from tests.admin.tasks_app import make_app


@pytest.fixture
def served(database_url: str) -> Iterator[Served]:
    yield from serve_producers(database_url)


def bulk(served: Served, jobs: list[dict[str, Any]], **headers: str) -> httpx.Response:
    response: httpx.Response = served.client.post(
        "/api/v1/jobs/bulk", json={"jobs": jobs}, headers={**BILLING, **headers}
    )
    return response


def stored(served: Served) -> int:
    return len(served.app.client.list(limit=1000))


def test_bulk_stores_every_job_with_a_result_per_item(served: Served) -> None:
    jobs = [{"task": "admin.add", "args": [i, i]} for i in range(50)]
    jobs.append({"task": "admin.add", "args": [0, 0], "dedupe_key": "one"})
    jobs.append({"task": "admin.add", "args": [0, 0], "dedupe_key": "one"})  # its duplicate
    response = bulk(served, jobs)
    assert response.status_code == 201, response.text
    items = response.json()["jobs"]
    assert [item["index"] for item in items] == list(range(52))
    assert response.json()["replayed"] is False
    assert items[51] == {"index": 51, "id": items[50]["id"], "duplicate": True}
    for i in (0, 49):
        job = served.app.client.get(items[i]["id"])
        envelope = f'{{"producer":"billing","args":[{i},{i}],"kwargs":{{}}}}'
        assert (job.task, job.args_json) == ("admin.add", envelope)
    assert stored(served) == 51
    served.app.worker(queues=("default",), burst=True, poll_interval_seconds=0.05).run()
    assert served.app.client.wait(items[49]["id"], timeout=5) == 98


def test_one_bad_item_refuses_the_whole_request(served: Served) -> None:
    jobs = [
        {"task": "admin.add", "args": [1, 2]},
        {"task": "no.such.task"},
        {"task": "admin.add", "args": [1]},  # b is missing
        {"task": "admin.add", "args": [1, 2], "expires_at": "2030-01-01T00:00:00"},  # no zone
        {"task": "admin.add", "args": [1, 2], "expires_at": "0001-01-01T00:00:00+05:00"},
    ]
    response = bulk(served, jobs)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["detail"] == "4 of 5 jobs refused; nothing was stored"
    assert [e["index"] for e in body["errors"]] == [1, 2, 3, 4]
    assert "no.such.task" in body["errors"][0]["detail"]
    assert "time zone" in body["errors"][2]["detail"]
    assert "between the years 1970 and 9000" in body["errors"][3]["detail"]
    assert stored(served) == 0
    # Shape errors are FastAPI's 422, one entry per bad field with the item's index.
    shape = bulk(served, [{"task": "admin.add", "priority": "high"}, {"args": []}])
    assert shape.status_code == 422
    assert {tuple(p["loc"][:3]) for p in shape.json()["detail"]} == {
        ("body", "jobs", 0),
        ("body", "jobs", 1),
    }
    assert stored(served) == 0


def test_an_idempotency_key_replays_the_first_answer(served: Served) -> None:
    jobs = [{"task": "admin.add", "args": [i, 1]} for i in range(5)]
    first = bulk(served, jobs, **{"Idempotency-Key": "import-42"})
    assert first.status_code == 201, first.text
    again = bulk(served, jobs, **{"Idempotency-Key": "import-42"})
    assert again.status_code == 200, again.text
    assert again.json() == {
        "jobs": [{**item, "duplicate": False} for item in first.json()["jobs"]],
        "replayed": True,
    }
    assert stored(served) == 5
    other = bulk(served, jobs[:4], **{"Idempotency-Key": "import-42"})
    assert other.status_code == 409
    # Another caller with the same key and body is refused, not shown billing's ids.
    admin = served.client.post(
        "/api/v1/jobs/bulk",
        json={"jobs": jobs},
        headers={**ADMIN, "Idempotency-Key": "import-42"},
    )
    assert admin.status_code == 409
    # A single enqueue's key is another namespace: the same key makes its own job.
    single = served.client.post(
        "/api/v1/jobs", json=jobs[0], headers={**BILLING, "Idempotency-Key": "import-42"}
    )
    assert single.status_code == 201
    assert stored(served) == 6


def test_held_and_expiring_jobs_over_http(served: Served) -> None:
    deadline = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    jobs = [
        {"task": "admin.add", "args": [1, 2], "held": True},
        {"task": "admin.add", "args": [3, 4], "expires_at": deadline.isoformat()},
    ]
    items = bulk(served, jobs).json()["jobs"]
    held = served.client.get(f"/api/v1/jobs/{items[0]['id']}", headers=BILLING).json()
    assert held["state"] == "held"
    expiring = served.client.get(f"/api/v1/jobs/{items[1]['id']}", headers=BILLING).json()
    assert datetime.fromisoformat(expiring["expires_at"]) == deadline
    single = served.client.post(
        "/api/v1/jobs",
        json={"task": "admin.add", "args": [5, 6], "held": True, "expires_at": str(deadline)},
        headers=BILLING,
    )
    assert single.status_code == 201, single.text
    assert single.json()["job"]["state"] == "held"
    assert datetime.fromisoformat(single.json()["job"]["expires_at"]) == deadline
    # A held job starts only when asked (the admin token starts it).
    started = served.client.post(f"/api/v1/jobs/{items[0]['id']}/start", headers=ADMIN)
    assert started.json()["state"] == "queued"


def test_concurrent_twins_with_one_key_make_one_set_of_jobs(database_url: str) -> None:
    app = make_app(database_url=database_url)
    http = build_http(
        app, admin_tokens=[ADMIN_TOKEN], read_tokens=[READ_TOKEN], producers=PRODUCERS
    )
    server = AdminServer(http, host="127.0.0.1", port=0)
    port = server.start()
    jobs = [{"task": "admin.add", "args": [i, 0]} for i in range(200)]
    answers: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            headers = {**BILLING, "Idempotency-Key": "twins"}
            answers.append(client.post("/api/v1/jobs/bulk", json={"jobs": jobs}, headers=headers))

    try:
        threads = [threading.Thread(target=send) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(a.status_code for a in answers) == [200, 200, 200, 201], [
            a.text for a in answers
        ]
        assert len({str(a.json()["jobs"]) for a in answers}) == 1
        assert len(app.client.list(limit=1000)) == 200
    finally:
        server.stop()
        app.close()


def test_too_many_jobs_or_bytes_are_refused(make_database_url: Callable[[str], str]) -> None:
    for served in serve_producers(make_database_url("sqlite")):
        many = bulk(served, [{"task": "admin.add", "args": [1, 2]}] * 1001)
        assert many.status_code == 413
        assert many.json()["detail"] == "a bulk request carries at most 1000 jobs, got 1001"
        # 1000 jobs of 9 KB each: past the 8 MiB a bulk request may carry.
        big = [{"task": "admin.add", "args": [1, 2], "kwargs": {"pad": "x" * 9000}}] * 1000
        huge = bulk(served, big)
        assert huge.status_code == 413, huge.text[:200]
        assert stored(served) == 0
