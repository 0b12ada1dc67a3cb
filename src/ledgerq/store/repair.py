"""SqlLedgerRepair: the reconciler's statements. Every one is safe to repeat and to race: the
stuck-job reset is fenced on ``(id, attempt, state = 'running')`` and re-checks staleness on
the row it writes, so an owner that heartbeats meanwhile keeps its job."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from ledgerq.core import fleet, lifetime
from ledgerq.core.job import JobHint
from ledgerq.core.ports import Purge, StuckReset
from ledgerq.core.states import JobState
from ledgerq.store import batch_hook, moves
from ledgerq.store.history_pruning import SqlHistoryPruner
from ledgerq.store.tables import (
    idempotency_keys,
    job_dedupe_windows,
    jobs,
    lifetime_totals,
    paused_queues,
)
from ledgerq.store.transactions import translate_error

S = JobState
_NEVER_STARTED = [S.HELD.value, S.SCHEDULED.value, S.QUEUED.value]


class SqlLedgerRepair(SqlHistoryPruner):
    """The LedgerRepair port over SQLAlchemy Core (history pruning: ``history_pruning.py``)."""

    @contextmanager
    def exclusive(self, name: str) -> Iterator[bool]:
        """Hold the named lock (PostgreSQL advisory lock, MySQL ``GET_LOCK``) for the block;
        yields False at once if another process holds it."""
        try:
            with self.engine.connect() as plain:
                conn = plain.execution_options(isolation_level="AUTOCOMMIT")
                held = self.dialect.try_lock(conn, name)
                try:
                    yield held
                finally:
                    if held:
                        self.dialect.unlock(conn, name)
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    def _stale(self, stuck_after_seconds: float) -> sa.ColumnElement[bool]:
        cutoff = self.dialect.now_plus(sa.literal(-float(stuck_after_seconds), sa.Float))
        return sa.and_(
            jobs.c.state == S.RUNNING.value,
            sa.func.coalesce(jobs.c.heartbeat_at, jobs.c.claimed_at, jobs.c.run_at) < cutoff,
            sa.or_(jobs.c.progress_at.is_(None), jobs.c.progress_at < cutoff),
        )

    def reset_stuck_jobs(self, *, stuck_after_seconds: float, limit: int) -> StuckReset:
        """Put running jobs with neither heartbeat nor progress for ``stuck_after_seconds``
        back to queued (their attempt stays, so the lost owner's writes stay refused), or make
        them dead when their attempts are spent (see ``moves.requeue_or_bury``)."""
        stale = self._stale(stuck_after_seconds)
        lost = moves.Lost(
            "stuck",
            f"no heartbeat or progress for {stuck_after_seconds:g} s and no attempts left",
            fleet.Outcome.ORPHANED,
            still=stale,
        )
        with self._begin() as conn:
            rows: Sequence[Any] = conn.execute(moves.running_rows(stale).limit(limit)).all()
            requeued, dead = moves.requeue_or_bury(conn, self.dialect, rows, lost)
        return StuckReset(
            requeued=[JobHint(int(r.id), str(r.queue), int(r.priority)) for r in requeued],
            dead=[int(r.id) for r in dead],
        )

    def queued_hints(self, *, waiting_seconds: float, limit: int) -> list[JobHint]:
        """Hints of queued jobs (of queues not paused) due for at least ``waiting_seconds``,
        most urgent first."""
        cutoff = self.dialect.now_plus(sa.literal(-float(waiting_seconds), sa.Float))
        stmt = (
            sa.select(jobs.c.id, jobs.c.queue, jobs.c.priority)
            .where(
                jobs.c.state == S.QUEUED.value,
                jobs.c.run_at <= cutoff,
                ~sa.exists().where(paused_queues.c.queue == jobs.c.queue),
            )
            .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
        return [JobHint(int(i), str(q), int(p)) for i, q, p in rows]

    def purge_jobs(
        self, *, succeeded_after_seconds: float, failed_after_seconds: float, limit: int
    ) -> Purge:
        """Delete succeeded jobs finished before their retention, dead and cancelled ones
        before theirs, and never-started jobs whose ``expires_at`` passed; ``limit`` of each
        state. The deleted rows are added to ``lifetime_totals`` (per queue, task and state;
        ``expired`` for the unstarted ones) in the same transaction, so the lifetime figures
        (``count_lifetime``) never change by a prune."""
        d = self.dialect

        def finished_before(state: JobState, seconds: float) -> sa.ColumnElement[bool]:
            cutoff = d.now_plus(sa.literal(-float(seconds), sa.Float))
            return sa.and_(jobs.c.state == state.value, jobs.c.finished_at < cutoff)

        # (reason reported, state counted in lifetime_totals, condition): one condition per
        # counted state, so a row's counted state is the one its delete re-checked.
        picks = (
            ("succeeded", S.SUCCEEDED.value, finished_before(S.SUCCEEDED, succeeded_after_seconds)),
            ("failed", S.DEAD.value, finished_before(S.DEAD, failed_after_seconds)),
            ("failed", S.CANCELLED.value, finished_before(S.CANCELLED, failed_after_seconds)),
            (
                "expired",
                lifetime.EXPIRED,
                sa.and_(
                    jobs.c.state.in_(_NEVER_STARTED),
                    jobs.c.attempt == 0,
                    jobs.c.expires_at.is_not(None),
                    jobs.c.expires_at < d.now(),
                ),
            ),
        )
        deleted: dict[str, list[int]] = {"succeeded": [], "failed": [], "expired": []}
        with self._begin() as conn:
            for reason, counted_as, condition in picks:
                gone = self._delete_jobs(conn, condition, limit)
                self._count_pruned(conn, counted_as, gone)
                deleted[reason] = sorted([*deleted[reason], *gone])
        return Purge(**deleted)

    def _delete_jobs(
        self, conn: sa.Connection, condition: sa.ColumnElement[bool], limit: int
    ) -> dict[int, tuple[str, str]]:
        """Delete up to ``limit`` jobs meeting ``condition`` (and their Idempotency-Keys);
        return the deleted ones' (queue, task) by id."""
        pick = sa.select(jobs.c.id, jobs.c.queue, jobs.c.task).where(condition)
        found: Sequence[Any] = conn.execute(pick.order_by(jobs.c.id).limit(limit)).all()
        rows = {int(r.id): (str(r.queue), str(r.task)) for r in found}
        if not rows:
            return rows
        # Re-checked on delete: a job may have moved since it was selected.
        conn.execute(sa.delete(jobs).where(jobs.c.id.in_(list(rows)), condition))
        kept: Sequence[Any] = (
            conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(list(rows)))).scalars().all()
        )
        for job_id in kept:
            del rows[int(job_id)]
        # An Idempotency-Key answers with its job; once the job is gone, so is it.
        gone = list(rows)
        conn.execute(sa.delete(idempotency_keys).where(idempotency_keys.c.job_id.in_(gone)))
        return rows

    def _count_pruned(
        self, conn: sa.Connection, state: str, gone: dict[int, tuple[str, str]]
    ) -> None:
        """Add the deleted rows to ``lifetime_totals`` (one row per queue, task and state,
        created at zero when new)."""
        per_key = Counter(gone.values())
        t = lifetime_totals.c
        for (queue, task), n in sorted(per_key.items()):
            key = {"queue": queue, "task": task, "state": state}
            self.dialect.insert_or_skip(conn, lifetime_totals, {**key, "count": 0})
            conn.execute(
                sa.update(lifetime_totals)
                .where(t.queue == queue, t.task == task, t.state == state)
                .values(count=t.count + n)
            )

    def purge_dedupe_windows(self, *, limit: int) -> int:
        """Delete up to ``limit`` expired rows of ``job_dedupe_windows``. An expired window is
        the same as none (the next enqueue of its key takes it anew), so only the table's
        growth is at stake; the expiry is checked again by the delete itself."""
        expired = job_dedupe_windows.c.expires_at < self.dialect.now()
        pick = sa.select(job_dedupe_windows.c.dedupe_key).where(expired).limit(limit)
        with self._begin() as conn:
            keys: list[str] = list(conn.execute(pick).scalars())
            if not keys:
                return 0
            gone = sa.delete(job_dedupe_windows).where(
                job_dedupe_windows.c.dedupe_key.in_(keys), expired
            )
            return int(conn.execute(gone).rowcount)

    def advance_batches(self, *, limit: int) -> int:
        """Fire due callbacks of unfinished batches (see ``batch_hook.advance_open``)."""
        with self._begin() as conn:
            return batch_hook.advance_open(conn, self.dialect, limit=limit)
