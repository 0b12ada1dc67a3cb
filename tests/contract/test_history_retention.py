"""The LedgerRepair contract of ``prune_history`` and the reconciler's retention pass, on
SQLite, PostgreSQL and MariaDB: old rows of every history table go, young ones and the ones
still needed stay (a running attempt, a schedule's newest run with a job, the items of a job
that exists, an unfinished batch), a chunk per transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.core.job import NewJob
from ledgerq.core.retention import DAY, HistoryRetention, HistoryTable
from ledgerq.runtime.reconciler import ReconcilePolicy, Reconciler
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.repair import SqlLedgerRepair
from ledgerq.store.tables import (
    batches,
    failover_events,
    job_assignments,
    job_items,
    jobs,
    schedule_runs,
    worker_health_checks,
)
from ledgerq.transport.polling import PollingTransport

T = HistoryTable
OLD, YOUNG = 10.0, 1.0  # days ago; the retention below is 5 days
AGE = 5 * DAY


@pytest.fixture
def repair(engine: sa.Engine) -> SqlLedgerRepair:
    return SqlLedgerRepair(engine)


def when(repair: SqlLedgerRepair, days: float) -> Any:
    return repair.dialect.bind_time(datetime.now(UTC) - timedelta(days=days))


def insert(repair: SqlLedgerRepair, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    with repair.engine.begin() as conn:
        conn.execute(sa.insert(table), rows)


def count(repair: SqlLedgerRepair, table: sa.Table) -> int:
    with repair.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def job(repair: SqlLedgerRepair, **values: Any) -> int:
    store = SqlJobStore(repair.engine)
    (made,) = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]")])
    if values:
        with repair.engine.begin() as conn:
            conn.execute(sa.update(jobs).where(jobs.c.id == made.job_id).values(values))
    return made.job_id


def prune(repair: SqlLedgerRepair, table: HistoryTable, limit: int = 100) -> int:
    return repair.prune_history(table, older_than_seconds=AGE, limit=limit)


def test_health_checks_and_failover_events_go_by_age(repair: SqlLedgerRepair) -> None:
    insert(
        repair,
        worker_health_checks,
        [
            {"worker_id": "w", "checked_at": when(repair, d), "healthy": True, "jobs_in_flight": 0}
            for d in (OLD, OLD, YOUNG)
        ],
    )
    event = {"worker_id": "w", "detected_by": "t", "jobs_requeued": 0, "jobs_dead": 0}
    insert(
        repair,
        failover_events,
        [
            {**event, "detected_at": when(repair, d), "job_ids": "[]", "duration_ms": 1.0}
            for d in (OLD, YOUNG)
        ],
    )
    assert prune(repair, T.HEALTH_CHECKS, limit=1) == 1  # a chunk at a time
    assert prune(repair, T.HEALTH_CHECKS) == 1
    assert prune(repair, T.HEALTH_CHECKS) == 0
    assert count(repair, worker_health_checks) == 1
    assert prune(repair, T.FAILOVER_EVENTS) == 1 and count(repair, failover_events) == 1


def test_only_ended_old_attempts_go(repair: SqlLedgerRepair) -> None:
    row = {"worker_id": "w", "outcome": "succeeded"}
    insert(
        repair,
        job_assignments,
        [
            {
                **row,
                "job_id": 1,
                "attempt": 1,
                "started_at": when(repair, OLD),
                "ended_at": when(repair, OLD),
            },
            {
                **row,
                "job_id": 1,
                "attempt": 2,
                "started_at": when(repair, OLD),
                "ended_at": when(repair, YOUNG),
            },
            # Running since long ago: still needed.
            {
                **row,
                "job_id": 2,
                "attempt": 1,
                "started_at": when(repair, OLD),
                "ended_at": None,
                "outcome": None,
            },
        ],
    )
    assert prune(repair, T.ASSIGNMENTS) == 1
    with repair.engine.connect() as conn:
        left = conn.execute(sa.select(job_assignments.c.job_id, job_assignments.c.attempt)).all()
    assert sorted(tuple(r) for r in left) == [(1, 2), (2, 1)]


def test_schedule_runs_keep_each_schedules_newest_run_with_a_job(repair: SqlLedgerRepair) -> None:
    def run(schedule: str, days: float, job_id: int | None) -> dict[str, Any]:
        at = when(repair, days)
        return {
            "schedule": schedule,
            "tick": at,
            "job_id": job_id,
            "executed_by": "s",
            "created_at": at,
        }

    insert(
        repair,
        schedule_runs,
        [
            run("daily", 12, 1),
            run("daily", OLD, None),  # a skipped tick
            run("daily", YOUNG, 3),
            run("yearly", 300, 4),  # old, but its overlap check reads it
            run("yearly", 200, None),
        ],
    )
    assert prune(repair, T.SCHEDULE_RUNS) == 3
    with repair.engine.connect() as conn:
        left = conn.execute(sa.select(schedule_runs.c.schedule, schedule_runs.c.job_id)).all()
    assert sorted(tuple(r) for r in left) == [("daily", 3), ("yearly", 4)]


def test_items_go_only_once_their_job_is_gone(repair: SqlLedgerRepair) -> None:
    alive = job(repair)
    gone = alive + 1000
    item = {"state": "succeeded", "attempt": 1}
    insert(
        repair,
        job_items,
        [
            {**item, "job_id": alive, "item_key": "a", "finished_at": when(repair, OLD)},
            {**item, "job_id": gone, "item_key": "a", "finished_at": when(repair, OLD)},
            {**item, "job_id": gone, "item_key": "b", "finished_at": when(repair, OLD)},
            {**item, "job_id": gone, "item_key": "c", "finished_at": when(repair, YOUNG)},
        ],
    )
    assert prune(repair, T.JOB_ITEMS, limit=1) == 1
    assert prune(repair, T.JOB_ITEMS) == 1
    with repair.engine.connect() as conn:
        left = conn.execute(sa.select(job_items.c.job_id, job_items.c.item_key)).all()
    assert sorted(tuple(r) for r in left) == [(alive, "a"), (gone, "c")]


def test_only_finished_old_batches_go(repair: SqlLedgerRepair) -> None:
    def batch(fired_days: float | None) -> int:
        fired = when(repair, fired_days) if fired_days is not None else None
        with repair.engine.begin() as conn:
            made = conn.execute(
                sa.insert(batches).values(
                    size=1, callbacks="{}", created_at=when(repair, 40), complete_fired_at=fired
                )
            )
            return int(made.inserted_primary_key[0])

    done_old, done_young, never, reopened = batch(OLD), batch(YOUNG), batch(None), batch(OLD)
    job(repair, batch_id=done_old, state="succeeded")
    job(repair, batch_id=reopened, state="queued")  # a member retried after completion
    assert prune(repair, T.BATCHES) == 1
    with repair.engine.connect() as conn:
        left = set(conn.execute(sa.select(batches.c.id)).scalars())
    assert left == {done_young, never, reopened}


def test_the_reconciler_prunes_every_table_in_chunks(repair: SqlLedgerRepair) -> None:
    insert(
        repair,
        worker_health_checks,
        [
            {"worker_id": "w", "checked_at": when(repair, d), "healthy": True, "jobs_in_flight": 0}
            for d in [OLD] * 5 + [YOUNG]
        ],
    )
    history = HistoryRetention(**{f"{t}_seconds": AGE for t in _FIELDS}, chunk=2, max_chunks=2)
    reconciler = Reconciler(
        repair, SqlJobStore(repair.engine), PollingTransport(), ReconcilePolicy(history=history)
    )
    first = reconciler.run_once()
    assert first.pruned_health_checks == 4  # two chunks of two, then the pass moves on
    assert count(repair, worker_health_checks) == 2
    # The next pass waits for ``every_seconds``; a fresh reconciler prunes at once.
    assert reconciler.run_once().pruned_health_checks == 0
    again = Reconciler(
        repair, SqlJobStore(repair.engine), PollingTransport(), ReconcilePolicy(history=history)
    )
    assert again.run_once().pruned_health_checks == 1
    assert count(repair, worker_health_checks) == 1


_FIELDS = (
    "health_checks",
    "failover_events",
    "assignments",
    "schedule_runs",
    "job_items",
    "batches",
)
