"""``/api/v1/batches/{id}`` over a real ledger: progress, members per state and callbacks as
``ledgerq batch show`` reports them, and ``retry-failed`` reruns the failed members only."""

from __future__ import annotations

from typing import Any

from ledgerq import JobContext, LedgerQ
from tests.admin.conftest import ADMIN, READ, Served

QUEUES = ("default", "mail")


def drain(app: LedgerQ) -> None:
    """Run every due job of the test queues (members and callbacks) until none is left."""
    app.worker(queues=QUEUES, burst=True, concurrency=2, poll_interval_seconds=0.05).run()


def batch_of(served: Served, batch_id: int) -> dict[str, Any]:
    response = served.client.get(f"/api/v1/batches/{batch_id}", headers=READ)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_progress_callbacks_and_retry_of_only_the_failed(served: Served) -> None:
    app, client = served.app, served.client
    fired: list[int] = []

    @app.task(name="admin.batch_done", queue="default")
    def batch_done(ctx: JobContext, batch_id: int) -> None:
        fired.append(batch_id)

    batch = app.batch(
        [("admin.add", (1, 2)), ("admin.flaky", ()), ("admin.boom", ())],
        on_failure="admin.batch_done",
        on_complete="admin.batch_done",
    )
    assert batch.id is not None
    added, flaky, boom = batch.job_ids
    waiting = batch_of(served, batch.id)
    assert (waiting["size"], waiting["finished"], waiting["progress"]) == (3, 0, 0.0)
    assert waiting["counts"]["queued"] == 3
    assert waiting["callbacks"] == {"failure": "admin.batch_done", "complete": "admin.batch_done"}
    assert all(when is None for when in waiting["fired_at"].values())

    drain(app)
    done = batch_of(served, batch.id)
    assert (done["finished"], done["progress"]) == (3, 1.0)
    assert (done["counts"]["succeeded"], done["counts"]["dead"]) == (1, 2)
    assert done["fired_at"]["failure"] is not None and done["fired_at"]["complete"] is not None
    assert fired == [batch.id, batch.id]

    retried = client.post(f"/api/v1/batches/{batch.id}/retry-failed", headers=ADMIN)
    assert retried.status_code == 200, retried.text
    assert retried.json()["batch_id"] == batch.id
    assert sorted(retried.json()["retried"]) == sorted([flaky, boom])
    assert batch_of(served, batch.id)["counts"]["queued"] == 2
    drain(app)
    again = batch_of(served, batch.id)
    assert (again["counts"]["succeeded"], again["counts"]["dead"]) == (2, 1)
    attempts = {
        job_id: client.get(f"/api/v1/jobs/{job_id}", headers=READ).json()["attempt"]
        for job_id in batch.job_ids
    }
    assert attempts == {added: 1, flaky: 2, boom: 2}  # the succeeded member never reran
    assert fired == [batch.id, batch.id]  # each callback fires once per batch

    nothing = client.post(f"/api/v1/batches/{batch.id}/retry-failed", headers=ADMIN).json()
    assert nothing["retried"] == [boom]


def test_unknown_and_malformed_batch_ids(served: Served) -> None:
    client = served.client
    missing = client.get("/api/v1/batches/987654", headers=READ)
    assert (missing.status_code, missing.json()) == (404, {"detail": "no batch with id 987654"})
    retry = client.post("/api/v1/batches/987654/retry-failed", headers=ADMIN)
    assert (retry.status_code, retry.json()) == (404, {"detail": "no batch with id 987654"})
    for bad in ("0", "-1", "abc", str(2**63)):
        assert client.get(f"/api/v1/batches/{bad}", headers=READ).status_code == 422, bad


def test_batches_need_a_token_and_retry_needs_the_admin_one(served_sqlite: Served) -> None:
    client = served_sqlite.client
    batch = served_sqlite.app.batch([("admin.boom", ())])
    assert client.get(f"/api/v1/batches/{batch.id}").status_code == 401
    assert client.post(f"/api/v1/batches/{batch.id}/retry-failed").status_code == 401
    refused = client.post(f"/api/v1/batches/{batch.id}/retry-failed", headers=READ)
    assert refused.status_code == 403
