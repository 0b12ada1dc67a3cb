"""The JobItemStore and BatchStore contracts, against SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.batches import BatchEvent, BatchNotFound, Callback
from ledgerq.core.items import ItemAlreadyDone
from ledgerq.core.job import Claim, Job, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.batch_store import SqlBatchStore
from ledgerq.store.item_store import SqlJobItems
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.repair import SqlLedgerRepair
from ledgerq.store.tables import job_items, jobs
from tests.conftest import engine_for
from tests.helpers import wait_until

S = JobState


@dataclass
class Stores:
    jobs: SqlJobStore
    items: SqlJobItems
    batches: SqlBatchStore
    repair: SqlLedgerRepair

    def claim(self, queue: str = "q", limit: int = 100) -> list[Job]:
        return self.jobs.claim_jobs(queues=[queue], worker_id="w", limit=limit, lease_seconds=60)


@pytest.fixture
def stores(database_url: str) -> Iterator[Stores]:
    engine = engine_for(database_url)
    job_store = SqlJobStore(engine)
    yield Stores(job_store, SqlJobItems(engine), SqlBatchStore(job_store), SqlLedgerRepair(engine))
    engine.dispose()


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(task="t", queue=queue, args_json='{"args":[],"kwargs":{}}', **kw)  # type: ignore[arg-type]


def running(stores: Stores) -> Claim:
    stores.jobs.insert_jobs([new()])
    (job,) = stores.claim()
    return Claim(job.id, job.attempt)


# -- items -----------------------------------------------------------------------------------


def test_items_are_recorded_once_and_a_later_attempt_sees_them(stores: Stores) -> None:
    claim = running(stores)
    assert stores.items.begin_items(claim, total=3) == set()
    stores.items.record_items(claim, [("a", None), ("b", '{"n":1}')])
    with pytest.raises(ItemAlreadyDone):
        stores.items.record_items(claim, [("a", None)])
    progress = stores.items.item_progress(claim.job_id)
    assert (progress.total, progress.done, progress.done_this_attempt) == (3, 2, 2)
    assert progress.fraction == pytest.approx(2 / 3)
    # The attempt is lost: put back and claimed again, the done items are reported.
    assert stores.jobs.requeue_jobs([claim]) == [True]
    (again,) = stores.claim()
    second = Claim(again.id, again.attempt)
    assert stores.items.begin_items(second, total=3) == {"a", "b"}
    stores.items.record_items(second, [("c", None)])
    progress = stores.items.item_progress(claim.job_id)
    assert (progress.done, progress.done_this_attempt) == (3, 1)


def test_a_stale_attempt_cannot_record_items(stores: Stores) -> None:
    claim = running(stores)
    stores.jobs.requeue_jobs([claim])
    (job,) = stores.claim()
    with pytest.raises(errors.LeaseLost):
        stores.items.record_items(claim, [("x", None)])
    with pytest.raises(errors.LeaseLost):
        stores.items.begin_items(claim, total=1)
    assert stores.items.item_progress(job.id).done == 0


def test_an_item_in_the_callers_transaction_commits_or_rolls_back_with_it(
    stores: Stores,
) -> None:
    claim = running(stores)
    engine = stores.jobs.engine
    with engine.begin() as conn:
        stores.items.record_items(claim, [("kept", None)], connection=conn)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        stores.items.record_items(claim, [("lost", None)], connection=conn)
        raise RuntimeError("the effect failed")
    with engine.connect() as conn:
        keys = set(conn.execute(sa.select(job_items.c.item_key)).scalars())
        progress_at = conn.execute(sa.select(jobs.c.progress_at)).scalar()
    assert keys == {"kept"}
    assert progress_at is not None  # the reconciler's stuck check sees item progress


def test_a_stale_item_write_in_the_callers_transaction_raises_and_writes_nothing(
    stores: Stores,
) -> None:
    claim = running(stores)
    stores.jobs.requeue_jobs([claim])
    engine = stores.jobs.engine
    with pytest.raises(errors.LeaseLost), engine.begin() as conn:
        conn.execute(sa.update(jobs).values(error="effect"))  # stands for the item's effect
        stores.items.record_items(claim, [("x", None)], connection=conn)
    with engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.error)).scalar() is None
        assert conn.execute(sa.select(sa.func.count()).select_from(job_items)).scalar() == 0


# -- held jobs -------------------------------------------------------------------------------


# -- batches ---------------------------------------------------------------------------------

CALLBACKS = {event: Callback(task=f"on_{event.value}", queue="cb") for event in BatchEvent}


def finish(stores: Stores, jobs_: list[Job], state: JobState) -> None:
    completions = [Completion(Claim(j.id, j.attempt), state, batch_id=j.batch_id) for j in jobs_]
    assert stores.jobs.complete_jobs(completions) == [True] * len(jobs_)


def callback_tasks(stores: Stores) -> list[str]:
    return sorted(j.task for j in stores.jobs.list_jobs(queue="cb"))


def test_batch_callbacks_fire_once_each_when_their_condition_first_holds(
    stores: Stores,
) -> None:
    batch_id, results = stores.batches.create_batch([new(), new(), new()], CALLBACKS)
    members = stores.claim()
    assert {j.id for j in members} == {r.job_id for r in results}
    assert {j.batch_id for j in members} == {batch_id}
    finish(stores, members[:1], S.SUCCEEDED)
    assert callback_tasks(stores) == []
    finish(stores, members[1:2], S.DEAD)
    assert callback_tasks(stores) == ["on_failure"]
    finish(stores, members[2:], S.SUCCEEDED)
    assert callback_tasks(stores) == ["on_complete", "on_failure"]
    (callback,) = [j for j in stores.jobs.list_jobs(queue="cb") if j.task == "on_failure"]
    assert f'"batch_id":{batch_id}' in callback.args_json
    status = stores.batches.get_batch(batch_id)
    assert (status.size, status.finished, status.counts[S.DEAD]) == (3, 3, 1)
    # Only the dead member is retried; when it succeeds, success fires (complete does not again).
    assert [h.job_id for h in stores.batches.retry_failed(batch_id)] == [members[1].id]
    finish(stores, stores.claim(), S.SUCCEEDED)
    assert callback_tasks(stores) == ["on_complete", "on_failure", "on_success"]
    assert stores.repair.advance_batches(limit=10) == 0
    assert callback_tasks(stores) == ["on_complete", "on_failure", "on_success"]


def test_a_retried_member_does_not_fire_callbacks_until_it_finishes(stores: Stores) -> None:
    batch_id, _ = stores.batches.create_batch([new()], CALLBACKS)
    (member,) = stores.claim()
    completion = Completion(Claim(member.id, member.attempt), S.FAILED, batch_id=batch_id)
    assert stores.jobs.complete_jobs([completion]) == [True]
    assert callback_tasks(stores) == []
    assert stores.batches.get_batch(batch_id).counts[S.FAILED] == 1


def test_the_reconciler_fires_callbacks_of_members_finished_outside_completions(
    stores: Stores,
) -> None:
    batch_id, results = stores.batches.create_batch([new(), new()], CALLBACKS)
    for result in results:
        stores.jobs.cancel_job(result.job_id)
    assert callback_tasks(stores) == []
    assert stores.repair.advance_batches(limit=10) == 1
    assert stores.repair.advance_batches(limit=10) == 0
    assert callback_tasks(stores) == ["on_complete"]
    assert stores.batches.get_batch(batch_id).fired_at[BatchEvent.COMPLETE] is not None


def test_unknown_and_invalid_batches_are_refused(stores: Stores) -> None:
    with pytest.raises(BatchNotFound):
        stores.batches.get_batch(10**9)
    with pytest.raises(BatchNotFound):
        stores.batches.retry_failed(10**9)
    with pytest.raises(errors.InvalidJob):
        stores.batches.create_batch([], CALLBACKS)
    with pytest.raises(errors.InvalidJob):
        stores.batches.create_batch([new(dedupe_key="k")], CALLBACKS)


def test_recorded_items_count_as_progress_for_the_stuck_check(stores: Stores) -> None:
    claim = running(stores)
    claimed_at = time.monotonic()
    stuck_after = 1.0
    wait_until(lambda: time.monotonic() > claimed_at + stuck_after + 0.2, what="heartbeat stale")
    stores.items.record_items(claim, [("a", None)])
    # No heartbeat for longer than stuck_after, but an item just now: not stuck.
    assert stores.repair.reset_stuck_jobs(stuck_after_seconds=stuck_after, limit=10).requeued == []
    reset = wait_until(
        lambda: stores.repair.reset_stuck_jobs(stuck_after_seconds=stuck_after, limit=10).requeued,
        what="stuck once items stop",
        timeout=10,
    )
    assert [h.job_id for h in reset] == [claim.job_id]


def test_concurrent_final_outcomes_fire_each_callback_once(stores: Stores) -> None:
    batch_id, _ = stores.batches.create_batch([new() for _ in range(24)], CALLBACKS)
    members = stores.claim(limit=24)
    groups = [members[i::8] for i in range(8)]  # eight completers, three members each
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda group: finish(stores, group, S.SUCCEEDED), groups))
    assert callback_tasks(stores) == ["on_complete", "on_success"]
    assert stores.batches.get_batch(batch_id).counts == {S.SUCCEEDED: 24}
