"""The store writes the attempts' history (``job_assignments``) itself, on every database, in
the transaction that ends an attempt: a completion, a put-back, a postponement, a cancel."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ledgerq.core.job import Claim, Job, NewJob, as_utc
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.limit_store import SqlLimitStore


@dataclass
class Stores:
    jobs: SqlJobStore
    fleet: SqlFleetAdmin
    limits: SqlLimitStore


@pytest.fixture
def stores(database_url: str) -> Iterator[Stores]:
    engine = create_engine(database_url)
    yield Stores(SqlJobStore(engine), SqlFleetAdmin(engine), SqlLimitStore(engine))
    engine.dispose()


def claimed(stores: Stores, count: int) -> list[Job]:
    new = [NewJob(task="t", queue="q", args_json="[]") for _ in range(count)]
    stores.jobs.insert_jobs(new)
    found = stores.jobs.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=30)
    assert len(found) == count
    return found


def history(stores: Stores) -> dict[int, dict[str, Any]]:
    return {int(r["job_id"]): r for r in stores.fleet.list_assignments()}


def test_claims_write_none_and_each_ended_attempt_gets_one_closed_row(stores: Stores) -> None:
    done, put_back, postponed, cancelled = claimed(stores, 4)
    assert history(stores) == {}
    assert stores.jobs.complete_jobs(
        [Completion(Claim(done.id, done.attempt), JobState.SUCCEEDED)]
    ) == [True]
    assert stores.jobs.requeue_jobs([Claim(put_back.id, put_back.attempt)]) == [True]
    assert (
        stores.limits.postpone_job(Claim(postponed.id, postponed.attempt), delay_seconds=60) is True
    )
    stores.jobs.cancel_job(cancelled.id)
    rows = history(stores)
    assert {job_id: row["outcome"] for job_id, row in rows.items()} == {
        done.id: "succeeded",
        put_back.id: "requeued",
        postponed.id: "requeued",
        cancelled.id: "lost",  # its worker's completion is refused from now on
    }
    for job in (done, put_back, postponed, cancelled):
        row = rows[job.id]
        assert (row["attempt"], row["worker_id"]) == (1, "w")
        assert as_utc(row["started_at"]) == job.claimed_at
        assert row["ended_at"] is not None


def test_a_refused_write_records_nothing(stores: Stores) -> None:
    [job] = claimed(stores, 1)
    stale = Claim(job.id, job.attempt + 1)
    assert stores.jobs.complete_jobs([Completion(stale, JobState.SUCCEEDED)]) == [False]
    assert stores.jobs.requeue_jobs([stale]) == [False]
    assert stores.limits.postpone_job(stale, delay_seconds=60) is False
    assert history(stores) == {}
