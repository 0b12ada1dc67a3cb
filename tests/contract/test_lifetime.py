"""Lifetime figures (``count_lifetime``) survive the retention prune (``purge_jobs``), against
SQLite, PostgreSQL and MariaDB: the pruner adds the rows it deletes to ``lifetime_totals`` in
the transaction of the delete."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ledgerq.core.job import Claim, NewJob
from ledgerq.core.lifetime import LifetimeTotal
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.repair import SqlLedgerRepair
from ledgerq.store.tables import jobs

S = JobState


def new(task: str, queue: str = "sms", **kw: object) -> NewJob:
    return NewJob(task=task, queue=queue, args_json='{"args":[],"kwargs":{}}', **kw)  # type: ignore[arg-type]


def run(store: SqlJobStore, ids: list[int], outcome: JobState) -> None:
    """Claim ``ids`` and finish them as ``outcome``."""
    claimed = store.claim_jobs(
        queues=["sms", "mail"], worker_id="w", limit=len(ids), lease_seconds=30, job_ids=ids
    )
    assert sorted(j.id for j in claimed) == sorted(ids)
    store.complete_jobs([Completion(Claim(j.id, j.attempt), outcome) for j in claimed])


def finished_long_ago(engine: sa.Engine) -> None:
    """Every finished job finished two hours ago (past a one-hour retention)."""
    past = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=2)
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs).where(jobs.c.finished_at.is_not(None)).values(finished_at=past)
        )


def prune(repair: SqlLedgerRepair) -> int:
    purge = repair.purge_jobs(succeeded_after_seconds=3600, failed_after_seconds=3600, limit=100)
    return len(purge.succeeded) + len(purge.failed) + len(purge.expired)


def test_lifetime_figures_are_unchanged_by_the_retention_prune(engine: sa.Engine) -> None:
    store, repair = SqlJobStore(engine), SqlLedgerRepair(engine)
    sent = [r.job_id for r in store.insert_jobs([new("send") for _ in range(5)])]
    failed = [r.job_id for r in store.insert_jobs([new("send", max_attempts=1)] * 2)]
    mails = [r.job_id for r in store.insert_jobs([new("mail", queue="mail")] * 3)]
    gone_at = datetime.now(UTC) - timedelta(seconds=5)
    store.insert_jobs([new("send", expires_at=gone_at)])
    waiting = store.insert_jobs([new("send")])[0].job_id
    run(store, sent, S.SUCCEEDED)
    run(store, failed, S.DEAD)
    run(store, mails[:2], S.SUCCEEDED)
    store.cancel_job(mails[2])
    before = store.count_lifetime()
    assert before == [
        LifetimeTotal("mail", "mail", enqueued=3, succeeded=2, cancelled=1),
        LifetimeTotal("sms", "send", enqueued=9, succeeded=5, dead=2),
    ]

    finished_long_ago(engine)
    assert prune(repair) == 5 + 2 + 3 + 1
    with engine.connect() as conn:
        assert set(conn.execute(sa.select(jobs.c.id)).scalars()) == {waiting}
    after = store.count_lifetime()
    expired = LifetimeTotal("sms", "send", enqueued=9, succeeded=5, dead=2, expired=1)
    assert after == [before[0], expired]  # the expired job is now told apart, nothing else

    # A second round adds to the same lifetime rows.
    more = [r.job_id for r in store.insert_jobs([new("send")] * 2)]
    run(store, [waiting, *more], S.SUCCEEDED)
    finished_long_ago(engine)
    assert prune(repair) == 3
    assert store.count_lifetime() == [
        before[0],
        LifetimeTotal("sms", "send", enqueued=11, succeeded=8, dead=2, expired=1),
    ]
    assert store.count_jobs() == {}
