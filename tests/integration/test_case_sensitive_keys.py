"""Keys and names are compared exactly, case included, on every database. MariaDB's default
collation (``utf8mb4_general_ci``) compares text without case: there a job whose dedupe key
differed from an unfinished one's only in case was taken for its duplicate and never stored,
a worker of queue ``emails`` claimed the jobs of ``Emails``, and an HTTP ``Idempotency-Key``
answered for another's job. The ledger's tables compare bytes (migration 0021)."""

from __future__ import annotations

from ledgerq import JobContext, LedgerQ
from ledgerq.core.operations import IdempotentRequest
from ledgerq.store.queues import SqlQueueControls
from tests.conftest import engine_for


def test_dedupe_keys_differing_in_case_are_two_jobs(app: LedgerQ) -> None:
    @app.task(name="report")
    def report(ctx: JobContext, customer: int) -> None: ...

    first = report.options(dedupe_key="Report-A").enqueue(1)
    second = report.options(dedupe_key="report-a").enqueue(2)
    again = report.options(dedupe_key="Report-A").enqueue(3)
    assert not second.duplicate and second.job_id != first.job_id
    assert again.duplicate and again.job_id == first.job_id


def test_a_worker_claims_only_its_queue_case_included(app: LedgerQ) -> None:
    @app.task(name="mail")
    def mail(ctx: JobContext, to: str) -> None: ...

    upper = mail.options(queue="Emails").enqueue("a@example.org")
    lower = mail.options(queue="emails").enqueue("b@example.org")
    claimed = app.client.store.claim_jobs(
        queues=["emails"], worker_id="w", limit=10, lease_seconds=30
    )
    assert [job.id for job in claimed] == [lower.job_id]
    assert app.jobs.get(upper.job_id).state.value == "queued"


def test_idempotency_keys_differing_in_case_are_two_requests(database_url: str) -> None:
    engine = engine_for(database_url)
    try:
        store = SqlQueueControls(engine)
        upper = IdempotentRequest("Order-7", 1, "hash-a")
        lower = IdempotentRequest("order-7", 2, "hash-b")
        assert store.remember_request(upper) == upper
        assert store.remember_request(lower) == lower
        assert store.find_request("order-7") == lower
    finally:
        engine.dispose()
