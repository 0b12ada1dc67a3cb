"""Inspection and operator actions on the ledger: look jobs up, count them, cancel and retry."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import errors, fleet, lifetime
from ledgerq.core.job import Job, JobHint, as_utc
from ledgerq.core.requeue import DeadJobFilter, RequeueReport
from ledgerq.core.states import FINISHED, UNFINISHED, JobState
from ledgerq.store.history import end_attempts, running_attempt_of
from ledgerq.store.tables import jobs, lifetime_totals
from ledgerq.store.transactions import SqlTransactions

S = JobState
#: Dead jobs one transaction of a bulk retry moves.
RETRY_CHUNK = 500


class SqlJobOperations(SqlTransactions):
    """The read and operator half of the JobStore port."""

    def get_job(self, job_id: int) -> Job:
        """Return the job or raise ``JobNotFound``."""
        with self._read() as conn:
            row = conn.execute(sa.select(*jobs.c).where(jobs.c.id == job_id)).mappings().first()
        if row is None:
            raise errors.JobNotFound(job_id)
        return Job.from_row(row)

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Return the newest jobs matching every given filter."""
        stmt = sa.select(*jobs.c).order_by(jobs.c.id.desc()).limit(limit)
        if state is not None:
            stmt = stmt.where(jobs.c.state == state.value)
        if queue is not None:
            stmt = stmt.where(jobs.c.queue == queue)
        if task is not None:
            stmt = stmt.where(jobs.c.task == task)
        with self._read() as conn:
            return [Job.from_row(r) for r in conn.execute(stmt).mappings()]

    def cancel_job(self, job_id: int) -> Job:
        """Cancel an unfinished job. A running one is cancelled in the ledger; its worker's
        fenced completion is then refused."""
        return self._move(job_id, S.CANCELLED, from_states=UNFINISHED)

    def retry_job(self, job_id: int) -> Job:
        """Queue a failed, dead or cancelled job again, due now."""
        return self._move(job_id, S.QUEUED, from_states=FINISHED - {S.SUCCEEDED} | {S.FAILED})

    def start_job(self, job_id: int) -> Job:
        """Queue a held job, due now; raise ``InvalidTransition`` if it is not held."""
        return self._move(job_id, S.QUEUED, from_states=frozenset({S.HELD}))

    def retry_dead_jobs(self, which: DeadJobFilter, *, dry_run: bool = False) -> RequeueReport:
        """Queue again, due now, the ``dead`` jobs ``which`` selects: ``RETRY_CHUNK`` per
        transaction in id order, so a large set never holds its rows locked for long. Fenced:
        each update re-checks ``state = 'dead'``, so a job retried, deleted or moved meanwhile
        is left alone and not counted. ``dry_run`` counts the matches and moves nothing."""
        matching = self._dead_matching(which)
        if dry_run:
            stmt = (
                sa.select(jobs.c.queue, jobs.c.task, sa.func.count())
                .where(matching)
                .group_by(jobs.c.queue, jobs.c.task)
            )
            with self._read() as conn:
                rows: Sequence[Any] = conn.execute(stmt).all()
            return RequeueReport(True, {(str(q), str(t)): int(n) for q, t, n in rows})
        counts: Counter[tuple[str, str]] = Counter()
        touched: list[int] = []
        after = 0
        while True:
            pick = (
                sa.select(jobs.c.id, jobs.c.queue, jobs.c.task)
                .where(matching, jobs.c.id > after)
                .order_by(jobs.c.id)
                .limit(RETRY_CHUNK)
            )
            with self._begin() as conn:
                picked: Sequence[Any] = conn.execute(pick).all()
                if not picked:
                    break
                after = int(picked[-1].id)
                groups: dict[tuple[str, str], list[int]] = defaultdict(list)
                for row in picked:
                    groups[(str(row.queue), str(row.task))].append(int(row.id))
                moved_queues = set()
                for key, ids in groups.items():
                    # The fence: ``matching`` again, on the rows as they are now.
                    again = sa.update(jobs).where(jobs.c.id.in_(ids), matching)
                    moved = int(conn.execute(again.values(self._queued_again())).rowcount)
                    if moved:
                        counts[key] += moved
                        moved_queues.add(key[0])
                    touched += ids
                if moved_queues:
                    self.dialect.notify(conn, moved_queues)
        return RequeueReport(False, dict(counts), tuple(touched))

    def _dead_matching(self, which: DeadJobFilter) -> sa.ColumnElement[bool]:
        # A workflow's dead step is rerun with its workflow (``workflow retry``), which
        # reopens the workflow and its cancelled dependents; alone it would run behind it.
        conditions = [jobs.c.state == S.DEAD.value, jobs.c.workflow_id.is_(None)]
        if which.queue is not None:
            conditions.append(jobs.c.queue == which.queue)
        if which.task is not None:
            conditions.append(jobs.c.task == which.task)
        if which.died_since is not None:
            since = self.dialect.bind_time(as_utc(which.died_since))
            conditions.append(jobs.c.finished_at >= since)
        return sa.and_(*conditions)

    def _queued_again(self) -> dict[str, Any]:
        """The values of an operator's retry (one job or many): ``queued``, due now, with
        its attempt kept (the fencing token never drops), so it gets one more run as its
        ``attempt`` is checked against ``max_attempts`` when that run ends."""
        d = self.dialect
        return {
            "state": S.QUEUED.value,
            "lease_expires_at": None,
            "run_at": d.now(),
            "finished_at": None,
            "worker_id": None,
        }

    def _move(self, job_id: int, target: JobState, *, from_states: frozenset[JobState]) -> Job:
        d = self.dialect
        values: dict[str, Any]
        if target is S.QUEUED:
            values = self._queued_again()
        else:
            values = {"state": target.value, "lease_expires_at": None, "finished_at": d.now()}
        with self._begin() as conn:
            stmt = (
                sa.update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state.in_([s.value for s in from_states]))
                .values(values)
            )
            # A running attempt ended here: its worker lost the job (its completion is refused).
            held = running_attempt_of(conn, job_id) if S.RUNNING in from_states else None
            if conn.execute(stmt).rowcount == 0:
                state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job_id)).scalar()
                if state is None:
                    raise errors.JobNotFound(job_id)
                raise errors.InvalidTransition(
                    f"job {job_id} is {state}: it cannot become {target.value}"
                )
            if held is not None:
                end_attempts(conn, d, [held], fleet.Outcome.LOST)
            if target is S.QUEUED:
                queue: str = conn.execute(
                    sa.select(jobs.c.queue).where(jobs.c.id == job_id)
                ).scalar_one()
                d.notify(conn, {queue})
        return self.get_job(job_id)

    def hints_for(self, job_ids: Sequence[int]) -> list[JobHint]:
        """Hints of those of ``job_ids`` that are queued now."""
        if not job_ids:
            return []
        stmt = sa.select(jobs.c.id, jobs.c.queue, jobs.c.priority).where(
            jobs.c.id.in_(list(job_ids)), jobs.c.state == S.QUEUED.value
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
        return [JobHint(int(i), str(q), int(p)) for i, q, p in rows]

    def check_tables(self) -> None:
        """Read nothing from ``jobs``: raises ``StoreError`` naming ``ledgerq db migrate`` when
        the ledger has no tables, ``StoreUnavailable`` when the database is down."""
        with self._read() as conn:
            conn.execute(sa.select(jobs.c.id).where(sa.false())).all()

    def count_waiting_to_start(self) -> dict[str, int]:
        """Per queue, ``running`` jobs whose body has not started (held in a prefetch)."""
        stmt = (
            sa.select(jobs.c.queue, sa.func.count())
            .where(jobs.c.state == JobState.RUNNING.value, jobs.c.started_at.is_(None))
            .group_by(jobs.c.queue)
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
            return {str(q): int(n) for q, n in rows}

    def count_jobs(self) -> dict[tuple[str, JobState], int]:
        """Number of jobs per (queue, state)."""
        stmt = sa.select(jobs.c.queue, jobs.c.state, sa.func.count()).group_by(
            jobs.c.queue, jobs.c.state
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
            return {(str(q), JobState(s)): int(n) for q, s, n in rows}

    def count_lifetime(self) -> list[lifetime.LifetimeTotal]:
        """Lifetime figures per (queue, task): the rows present plus those the retention
        pruner counted into ``lifetime_totals``, read in one statement (one snapshot, so a
        prune committing meanwhile is seen either wholly or not at all)."""
        present = sa.select(jobs.c.queue, jobs.c.task, jobs.c.state, sa.func.count()).group_by(
            jobs.c.queue, jobs.c.task, jobs.c.state
        )
        t = lifetime_totals.c
        pruned = sa.select(t.queue, t.task, t.state, t.count)
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(sa.union_all(present, pruned)).all()
        return lifetime.from_counts((str(q), str(k), str(s), int(n)) for q, k, s, n in rows)
