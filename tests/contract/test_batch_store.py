"""The BatchStore's listing contract on every database: the newest batches first with their
members per state, and a batch's members in the order they were added."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ledgerq.core.batches import BatchEvent, BatchNotFound
from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store import batch_store
from ledgerq.store.batch_store import SqlBatchStore
from ledgerq.store.jobs import SqlJobStore
from tests.contract.conftest import new_job

S = JobState


def test_batches_are_listed_newest_first_with_members_per_state(engine: sa.Engine) -> None:
    jobs = SqlJobStore(engine)
    batches = SqlBatchStore(jobs)
    assert batches.list_batches() == []
    first, _ = batches.create_batch([new_job("a"), new_job("a")], {})
    second, members = batches.create_batch([new_job("b")] * 3, {})
    claimed = jobs.claim_jobs(queues=["b"], worker_id="w", limit=2, lease_seconds=30)
    done = Completion(Claim(claimed[0].id, claimed[0].attempt), S.SUCCEEDED)
    assert jobs.complete_jobs([done]) == [True]

    listed = batches.list_batches()
    assert [b.id for b in listed] == [second, first]
    assert dict(listed[0].counts) == {S.SUCCEEDED: 1, S.RUNNING: 1, S.QUEUED: 1}
    assert listed[0].size == 3 and listed[0].finished == 1
    assert dict(listed[1].counts) == {S.QUEUED: 2}
    assert [b.id for b in batches.list_batches(limit=1)] == [second]

    in_order = batches.list_members(second)
    assert [j.id for j in in_order] == [r.job_id for r in members]
    assert all(j.batch_id == second for j in in_order)
    assert [j.id for j in batches.list_members(second, limit=2)] == [r.job_id for r in members[:2]]
    with pytest.raises(BatchNotFound):
        batches.list_members(second + 100)


def test_a_batch_read_while_its_last_member_finishes_shows_that_members_callbacks_fired(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last member's completion commits, with the callbacks' fired times, while the read
    # is under way: the status must not show every member finished and no callback fired.
    jobs = SqlJobStore(engine)
    batches = SqlBatchStore(jobs)
    batch_id, _ = batches.create_batch([new_job("c")], {})
    (member,) = jobs.claim_jobs(queues=["c"], worker_id="w", limit=1, lease_seconds=30)
    counted = batch_store.member_counts

    def finished_meanwhile(conn: sa.Connection, of_batch: int) -> dict[JobState, int]:
        done = Completion(Claim(member.id, member.attempt), S.SUCCEEDED, batch_id=batch_id)
        assert jobs.complete_jobs([done]) == [True]
        return counted(conn, of_batch)

    monkeypatch.setattr(batch_store, "member_counts", finished_meanwhile)
    status = batches.get_batch(batch_id)
    assert status.finished == status.size == 1
    assert status.fired_at[BatchEvent.COMPLETE] is not None
    assert status.fired_at[BatchEvent.SUCCESS] is not None
