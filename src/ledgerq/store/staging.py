"""Staging and upkeep of the ledger: due delayed and retrying jobs to ``queued``, the time to
the next retry, and table maintenance."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from ledgerq.core.job import JobHint, as_utc
from ledgerq.core.states import WAITING, JobState
from ledgerq.store.tables import jobs
from ledgerq.store.transactions import SqlTransactions, translate_error

S = JobState


class SqlJobStaging(SqlTransactions):
    """The staging and upkeep part of the JobStore port."""

    def stage_due_jobs(self, *, limit: int = 1000) -> list[JobHint]:
        """Move scheduled and failed jobs whose run_at has come to queued; return their hints."""
        d = self.dialect
        waiting = [s.value for s in WAITING]
        due = (
            sa.select(jobs.c.id)
            .where(jobs.c.state.in_(waiting), jobs.c.run_at <= d.now())
            .limit(limit)
        )
        with self._begin() as conn:
            ids: list[Any] = list(conn.execute(d.skipping_locked(due)).scalars())
            if not ids:
                return []
            stmt = (
                sa.update(jobs)
                .where(jobs.c.id.in_(ids), jobs.c.state.in_(waiting))
                .values(state=S.QUEUED.value)
            )
            conn.execute(stmt)
            rows: Sequence[Any] = conn.execute(
                sa.select(jobs.c.id, jobs.c.queue, jobs.c.priority).where(
                    jobs.c.id.in_(ids), jobs.c.state == S.QUEUED.value
                )
            ).all()
            hints = [JobHint(int(i), str(q), int(p)) for i, q, p in rows]
            d.notify(conn, {h.queue for h in hints})
        return hints

    def seconds_until_due(self, *, queues: Sequence[str]) -> float | None:
        """Seconds until the earliest job of ``queues`` that waits for its time is due: one
        delayed at enqueue or postponed by a limit (``scheduled``) or a retry (``failed``);
        None if there is none. Held jobs wait for a start, not a time, and do not count."""
        again = jobs.c.state.in_([S.SCHEDULED.value, S.FAILED.value])
        stmt = sa.select(sa.func.min(jobs.c.run_at), self.dialect.now()).where(
            again, jobs.c.queue.in_(list(queues))
        )
        with self._read() as conn:
            earliest, now = cast(tuple[Any, Any], tuple(conn.execute(stmt).one()))
        if earliest is None:
            return None
        if isinstance(now, str):  # SQLite returns its clock as text
            now = datetime.fromisoformat(now)
        return max((as_utc(earliest) - as_utc(now)).total_seconds(), 0.0)

    def maintain_tables(self) -> bool:
        """Vacuum and analyze the ledger where the database would not do it in time
        (PostgreSQL with many dead rows); True if it ran. Safe to call from every worker."""
        try:
            return self.dialect.maintain(self.engine)
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc
