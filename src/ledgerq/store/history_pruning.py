"""SqlHistoryPruner: deletes old rows of the history tables one short transaction at a time
(``core.retention``). Each call picks up to ``limit`` keys that qualify, then deletes those
keys re-checking the condition, so a row that stopped qualifying meanwhile (a batch member
retried, a job that still exists) stays. What never goes: an attempt still running, the
newest run with a job of each schedule (its overlap check reads it), the items of a job that
still exists, a batch whose completion has not fired or that has an unfinished member."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core.retention import HistoryTable
from ledgerq.core.states import UNFINISHED
from ledgerq.store.tables import (
    batches,
    failover_events,
    job_assignments,
    job_items,
    jobs,
    schedule_runs,
    worker_health_checks,
)
from ledgerq.store.transactions import SqlTransactions

T = HistoryTable


class SqlHistoryPruner(SqlTransactions):
    """Pruning of the history tables. Thread-safe; safe to run twice at once (a row deleted
    by the other run is simply not counted)."""

    def prune_history(self, table: HistoryTable, *, older_than_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` rows of ``table`` older than ``older_than_seconds`` (by the
        database clock) in one transaction; return how many went."""
        cutoff = self.dialect.now_plus(sa.literal(-float(older_than_seconds), sa.Float))
        keys, pick, recheck = self._plan(table, cutoff)
        with self._begin() as conn:
            found: Sequence[Any] = conn.execute(sa.select(*keys).where(pick).limit(limit)).all()
            if not found:
                return 0
            if len(keys) == 1:
                chosen = keys[0].in_([row[0] for row in found])
            else:
                chosen = sa.tuple_(*keys).in_([tuple(row) for row in found])
            target = keys[0].table
            return int(conn.execute(sa.delete(target).where(chosen, recheck)).rowcount)

    @staticmethod
    def _plan(
        table: HistoryTable, cutoff: sa.ColumnElement[Any]
    ) -> tuple[list[sa.Column[Any]], sa.ColumnElement[bool], sa.ColumnElement[bool]]:
        """The table's key columns, the condition its rows are picked by, and the condition
        the delete re-checks (MariaDB refuses a delete whose subquery reads its own table, so
        the schedule-runs delete re-checks the age only: a newer run only ever adds)."""
        if table is T.HEALTH_CHECKS:
            old = worker_health_checks.c.checked_at < cutoff
            return [worker_health_checks.c.id], old, old
        if table is T.FAILOVER_EVENTS:
            old = failover_events.c.detected_at < cutoff
            return [failover_events.c.id], old, old
        if table is T.ASSIGNMENTS:
            a = job_assignments
            old = sa.and_(a.c.ended_at.is_not(None), a.c.ended_at < cutoff)
            return [a.c.job_id, a.c.attempt], old, old
        if table is T.SCHEDULE_RUNS:
            old = schedule_runs.c.created_at < cutoff
            return [schedule_runs.c.id], sa.and_(old, ~_newest_run_with_a_job()), old
        if table is T.JOB_ITEMS:
            gone = ~sa.exists().where(jobs.c.id == job_items.c.job_id)
            old = sa.and_(job_items.c.finished_at < cutoff, gone)
            return [job_items.c.job_id, job_items.c.item_key], old, old
        unfinished = [s.value for s in UNFINISHED]
        open_member = sa.exists().where(
            jobs.c.batch_id == batches.c.id, jobs.c.state.in_(unfinished)
        )
        old = sa.and_(
            batches.c.complete_fired_at.is_not(None),
            batches.c.complete_fired_at < cutoff,
            ~open_member,
        )
        return [batches.c.id], old, old


def _newest_run_with_a_job() -> sa.ColumnElement[bool]:
    """The run is its schedule's newest with a job: the one ``overlap=skip`` checks."""
    newer = schedule_runs.alias("newer")
    return sa.and_(
        schedule_runs.c.job_id.is_not(None),
        ~sa.exists().where(
            newer.c.schedule == schedule_runs.c.schedule,
            newer.c.job_id.is_not(None),
            newer.c.tick > schedule_runs.c.tick,
        ),
    )
