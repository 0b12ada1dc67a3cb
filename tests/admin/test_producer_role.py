"""The producer token role: it enqueues (single, bulk, batches, workflows) and reads the jobs
it enqueued; every other endpoint answers it 403, and another producer's or the admin's jobs
404, as if they did not exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from ledgerq.admin.auth import producer_tokens
from tests.admin.conftest import ADMIN, READ, Served
from tests.admin.producer_serving import BILLING, CRM, serve_producers


@pytest.fixture
def served(make_database_url: Callable[[str], str]) -> Iterator[Served]:
    yield from serve_producers(make_database_url("sqlite"))


def enqueue(served: Served, headers: dict[str, str], **body: object) -> dict[str, object]:
    response = served.client.post("/api/v1/jobs", json=body, headers=headers)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, object] = response.json()
    return answer


def test_a_producer_enqueues_and_reads_only_its_own_jobs(served: Served) -> None:
    mine = enqueue(served, BILLING, task="admin.add", args=[1, 2])
    assert mine["job"]["producer"] == "billing"  # type: ignore[index]
    theirs = enqueue(served, CRM, task="admin.add", args=[3, 4])
    admins = enqueue(served, ADMIN, task="admin.add", args=[5, 6])
    assert admins["job"]["producer"] is None  # type: ignore[index]

    own = served.client.get(f"/api/v1/jobs/{mine['id']}", headers=BILLING)
    assert own.status_code == 200, own.text
    assert (own.json()["args"], own.json()["producer"]) == ([1, 2], "billing")
    for other in (theirs["id"], admins["id"], 999_999):
        refused = served.client.get(f"/api/v1/jobs/{other}", headers=BILLING)
        assert refused.status_code == 404, refused.text
        assert refused.json()["detail"] == f"no job with id {other}"
    # The handler sees its arguments only: the producer's name is no argument.
    assert served.app.client.get(int(mine["id"])).args_json.startswith('{"producer":"billing"')  # type: ignore[arg-type]
    # Read and admin tokens see every job, with who enqueued it.
    seen = served.client.get(f"/api/v1/jobs/{theirs['id']}", headers=READ).json()
    assert seen["producer"] == "crm"


#: What a producer token may call (besides the /health probes, which need no token).
PRODUCER_ROUTES = {
    ("POST", "/api/v1/jobs"),
    ("POST", "/api/v1/jobs/bulk"),
    ("POST", "/api/v1/batches"),
    ("POST", "/api/v1/workflows"),
    ("GET", "/api/v1/jobs/{job_id}"),
}


def test_every_other_endpoint_refuses_a_producer(served: Served) -> None:
    enqueue(served, BILLING, task="admin.add", args=[1, 2])  # job 1 is even its own
    document = served.client.get("/openapi.json", headers=ADMIN).json()
    routes = [("GET", "/openapi.json")] + [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        if not path.startswith("/health")
        for method in operations
    ]
    assert len(routes) > 25  # the whole API, not a sample
    checked = 0
    for method, path in routes:
        if (method, path) in PRODUCER_ROUTES:
            continue
        url = re.sub(r"\{[a-z_]+\}", "1", path)
        response = served.client.request(method, url, headers=BILLING)
        assert response.status_code == 403, (method, path, response.status_code, response.text)
        # The admin token is not refused for its role on the same request.
        assert served.client.request(method, url, headers=ADMIN).status_code != 403, path
        checked += 1
    assert checked == len(routes) - len(PRODUCER_ROUTES)


def test_the_read_token_cannot_enqueue(served: Served) -> None:
    body = {"task": "admin.add", "args": [1, 2]}
    assert served.client.post("/api/v1/jobs", json=body, headers=READ).status_code == 403
    bulk = served.client.post("/api/v1/jobs/bulk", json={"jobs": [body]}, headers=READ)
    assert bulk.status_code == 403
    assert "producer token" in bulk.json()["detail"]
    assert served.app.client.list() == []


def test_a_producer_never_sees_another_callers_job_through_dedupe_or_a_key(
    served: Served,
) -> None:
    first = enqueue(served, ADMIN, task="admin.add", args=[1, 2], dedupe_key="report-7")
    again = enqueue(served, BILLING, task="admin.add", args=[1, 2], dedupe_key="report-7")
    assert (again["id"], again["duplicate"], again["job"]) == (first["id"], True, None)

    body = {"task": "admin.add", "args": [1, 2]}
    key = {"Idempotency-Key": "order-1"}
    made = served.client.post("/api/v1/jobs", json=body, headers={**CRM, **key})
    assert made.status_code == 201
    # The same key and body from another producer: refused, not answered with crm's job.
    reused = served.client.post("/api/v1/jobs", json=body, headers={**BILLING, **key})
    assert reused.status_code == 409, reused.text
    replay = served.client.post("/api/v1/jobs", json=body, headers={**CRM, **key})
    assert (replay.status_code, replay.json()["id"]) == (200, made.json()["id"])


def test_no_dashboard_and_no_health_details_for_a_producer(served: Served) -> None:
    login = served.client.post(
        "/dashboard/login", data={"token": BILLING["Authorization"].split()[1]}
    )
    assert login.status_code == 403
    assert "ledgerq_session" not in login.cookies
    health = served.client.get("/health", headers=BILLING)
    assert health.status_code == 200 and health.json()["checks"] == {}
    assert served.client.get("/health", headers=READ).json()["checks"] != {}


def test_producer_token_entries_name_their_producer() -> None:
    assert producer_tokens(["tok-a", "billing:tok-b"]) == [
        ("producer", "tok-a"),
        ("billing", "tok-b"),
    ]
    for bad in ("bad name:tok", "billing:", ":tok"):
        with pytest.raises(ValueError) as caught:
            producer_tokens([bad])
        assert "tok" not in str(caught.value).replace("token", "")


def test_serve_refuses_a_bad_producer_entry_without_showing_the_token(
    make_database_url: Callable[[str], str],
) -> None:
    env = {
        **os.environ,
        "LEDGERQ_DATABASE_URL": make_database_url("sqlite"),
        "LEDGERQ_API_PRODUCER_TOKEN": "good:a-long-producer-token-1234,bad name:secret-tok-5678",
    }
    command = [sys.executable, "-m", "ledgerq.cli.main", "serve", "--port", "0"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "LEDGERQ_API_PRODUCER_TOKEN" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert "secret-tok" not in done.stderr + done.stdout
