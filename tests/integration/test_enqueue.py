"""Producer API on every backend: validation, dedupe, bulk and transactional enqueue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.core import errors

S = JobState


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, max_payload_bytes=1000)
    yield application
    application.close()


def test_bad_requests_are_refused_and_store_nothing(app: LedgerQ) -> None:
    @app.task(queue="sms")
    def send(ctx: JobContext, *args: object) -> None: ...

    bad_calls = [
        (errors.PayloadError, lambda: send.enqueue(object())),
        (errors.PayloadError, lambda: send.enqueue("x" * 2000)),
        (errors.InvalidQueueName, lambda: send.enqueue(1, queue="bad queue!")),
        (errors.InvalidSchedule, lambda: send.enqueue(1, delay=-5)),
        (errors.InvalidSchedule, lambda: send.enqueue(1, delay=10**9)),
        (errors.TaskNotRegistered, lambda: app.client.build("no.such.task")),
        (errors.PayloadError, lambda: send.enqueue_many([(1,), (object(),)])),
    ]
    for expected, call in bad_calls:
        with pytest.raises(expected):
            call()
    assert app.jobs.list() == []


def test_dedupe_returns_the_unfinished_duplicate(app: LedgerQ) -> None:
    @app.task()
    def report(ctx: JobContext, customer: int) -> None: ...

    first = report.enqueue(1, dedupe_key="report-1")
    second = report.enqueue(1, dedupe_key="report-1")
    assert second.duplicate and second.job_id == first.job_id
    assert len(app.jobs.list()) == 1


def test_enqueue_many_is_one_bulk_insert_with_ids_in_order(app: LedgerQ) -> None:
    @app.task()
    def send(ctx: JobContext, n: int) -> None: ...

    results = send.enqueue_many([(i,) for i in range(250)] + [{"n": 7}])
    ids = [r.job_id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 251
    assert app.jobs.get(ids[10]).args_json == '{"args":[10],"kwargs":{}}'
    assert app.jobs.get(ids[-1]).args_json == '{"args":[],"kwargs":{"n":7}}'


def test_enqueue_many_applies_its_options_to_every_job_and_checks_every_call(
    app: LedgerQ,
) -> None:
    @app.task(queue="sms", max_attempts=4)
    def send(ctx: JobContext, n: int) -> None: ...

    # The options are checked once for the batch, but every call's arguments and payload.
    with pytest.raises(errors.ArgumentsMismatch):
        send.enqueue_many([(1,), (2,), (3, 4), (5,)])
    with pytest.raises(errors.PayloadError):
        send.enqueue_many([(1,), ("é" * 600,)])  # 1,200 bytes once encoded: over the cap
    with pytest.raises(errors.InvalidQueueName):
        send.enqueue_many([(1,), (2,)], queue="bad queue!")
    assert app.jobs.list() == []
    ids = [h.job_id for h in send.enqueue_many([(n,) for n in range(5)], priority=3, delay=60)]
    ids += [h.job_id for h in send.enqueue_many([{"n": 9}], queue="other")]
    stored = [app.jobs.get(i) for i in ids]
    assert [j.args_json for j in stored[:5]] == [
        f'{{"args":[{n}],"kwargs":{{}}}}' for n in range(5)
    ]
    assert {(j.queue, j.priority, j.state, j.max_attempts) for j in stored[:5]} == {
        ("sms", 3, S.SCHEDULED, 4)
    }
    assert (stored[5].queue, stored[5].state, stored[5].args_json) == (
        "other",
        S.QUEUED,
        '{"args":[],"kwargs":{"n":9}}',
    )


def test_enqueue_many_dedupes_by_the_keys_given(app: LedgerQ) -> None:
    @app.task()
    def report(ctx: JobContext, customer: int) -> None: ...

    # A window without any key in the batch is no mistake: no job takes one.
    plain = report.enqueue_many([(1,), (2,)], dedupe_for=60)
    assert [h.duplicate for h in plain] == [False, False]
    results = report.enqueue_many([(3,), (4,), (5,)], dedupe_keys=[None, "k", "k"], dedupe_for=60)
    assert [r.duplicate for r in results] == [False, False, True]
    assert results[2].job_id == results[1].job_id
    again = report.enqueue_many([(6,)], dedupe_keys=["k"])
    assert again[0].duplicate and again[0].job_id == results[1].job_id
    assert len(app.jobs.list()) == 4


def test_transactional_enqueue_exists_only_if_the_business_data_commits(
    app: LedgerQ, database_url: str
) -> None:
    @app.task()
    def ship(ctx: JobContext, order_id: int) -> None: ...

    engine = app.parts.store.engine
    orders = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    orders.create(engine)
    with engine.connect() as conn:
        with pytest.raises(RuntimeError), app.transaction(conn) as tx:
            tx.execute(orders.insert().values(id=1))
            ship.enqueue(1, tx=tx)
            raise RuntimeError("payment declined")
        assert app.jobs.list() == []
        with app.transaction(conn) as tx:
            tx.execute(orders.insert().values(id=2))
            ship.enqueue(2, tx=tx)
    (job,) = app.jobs.list()
    assert job.args_json == '{"args":[2],"kwargs":{}}' and job.state is S.QUEUED
    with engine.connect() as conn:
        assert conn.execute(sa.select(orders.c.id)).scalars().all() == [2]


def test_cancel_and_retry_through_the_api(app: LedgerQ) -> None:
    @app.task()
    def job(ctx: JobContext) -> None: ...

    job_id = job.enqueue(delay=60).job_id
    assert app.jobs.cancel(job_id).state is S.CANCELLED
    assert app.jobs.retry(job_id).state is S.QUEUED
    with pytest.raises(errors.JobNotFound):
        app.jobs.get(999_999)
