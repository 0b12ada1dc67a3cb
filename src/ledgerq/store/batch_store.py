"""SqlBatchStore: batches of jobs. Members are inserted through the job store in the batch's
transaction; callbacks are decided by ``batch_hook`` when members finish."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.batches import BatchEvent, BatchNotFound, BatchStatus, Callback
from ledgerq.core.job import EnqueueResult, Job, JobHint, NewJob, as_utc
from ledgerq.core.states import JobState
from ledgerq.store.batch_hook import (
    FIRED,
    callbacks_json,
    callbacks_of,
    member_counts,
)
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import batches, jobs
from ledgerq.store.transactions import SqlTransactions

S = JobState
_RETRYABLE = [S.DEAD.value, S.FAILED.value]


class SqlBatchStore(SqlTransactions):
    """The BatchStore port; member jobs are inserted through the job store."""

    def __init__(self, job_store: SqlJobStore) -> None:
        super().__init__(job_store.engine)
        self._jobs = job_store

    def create_batch(
        self,
        members: Sequence[NewJob],
        callbacks: Mapping[BatchEvent, Callback],
        *,
        connection: object | None = None,
        on_commit: Callable[[list[EnqueueResult]], None] | None = None,
    ) -> tuple[int, list[EnqueueResult]]:
        """Insert the batch row and its members in one transaction (the caller's, if given);
        ``on_commit(results)`` runs once it committed."""
        if not members:
            raise errors.InvalidJob("a batch needs at least one job")
        if any(job.dedupe_key is not None for job in members):
            raise errors.InvalidJob("batch members cannot have a dedupe key")
        with self._in(connection) as conn:
            stmt = sa.insert(batches).values(
                size=len(members),
                callbacks=callbacks_json(callbacks),
                created_at=self.dialect.now(),
            )
            batch_id = int(conn.execute(stmt.returning(batches.c.id)).scalar_one())
            results = self._jobs.insert_jobs(members, connection=conn, on_commit=on_commit)
            ids = [r.job_id for r in results]
            conn.execute(sa.update(jobs).where(jobs.c.id.in_(ids)).values(batch_id=batch_id))
        return batch_id, results

    def count_open(self) -> int:
        """Batches whose members have not all finished (the completion has not fired)."""
        stmt = sa.select(sa.func.count()).where(batches.c.complete_fired_at.is_(None))
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def get_batch(self, batch_id: int) -> BatchStatus:
        """Return the batch with its members per state, or raise ``BatchNotFound``."""
        with self._read() as conn:
            # Members first: the transaction that finishes the last member also sets the
            # callbacks' fired times, so a row read after counts that show it finished shows
            # them too. (Under READ COMMITTED each statement reads anew: the other order once
            # gave a waiter every member finished and no callback fired.)
            counts = member_counts(conn, batch_id)
            found: Any = (
                conn.execute(sa.select(*batches.c).where(batches.c.id == batch_id))
                .mappings()
                .first()
            )
            if found is None:
                raise BatchNotFound(batch_id)
        return _status(found, counts)

    def list_batches(self, *, limit: int = 50) -> list[BatchStatus]:
        """The newest ``limit`` batches, newest first, with their members per state (two
        statements, whatever the number)."""
        with self._read() as conn:
            found: Sequence[Any] = (
                conn.execute(sa.select(*batches.c).order_by(batches.c.id.desc()).limit(limit))
                .mappings()
                .all()
            )
            ids = [int(row["id"]) for row in found]
            counts: dict[int, dict[JobState, int]] = {i: {} for i in ids}
            if ids:
                stmt = (
                    sa.select(jobs.c.batch_id, jobs.c.state, sa.func.count())
                    .where(jobs.c.batch_id.in_(ids))
                    .group_by(jobs.c.batch_id, jobs.c.state)
                )
                grouped: Sequence[Any] = conn.execute(stmt).all()
                for batch_id, state, n in grouped:
                    counts[int(batch_id)][S(state)] = int(n)
        return [_status(row, counts[int(row["id"])]) for row in found]

    def list_members(self, batch_id: int, *, limit: int = 200) -> list[Job]:
        """The batch's member jobs in the order they were added (the first ``limit``);
        ``BatchNotFound`` if there is no such batch."""
        with self._read() as conn:
            if (
                conn.execute(sa.select(batches.c.id).where(batches.c.id == batch_id)).first()
                is None
            ):
                raise BatchNotFound(batch_id)
            stmt = (
                sa.select(*jobs.c)
                .where(jobs.c.batch_id == batch_id)
                .order_by(jobs.c.id)
                .limit(limit)
            )
            return [Job.from_row(r) for r in conn.execute(stmt).mappings()]

    def retry_failed(self, batch_id: int) -> list[JobHint]:
        """Queue the dead and failed members again, due now; return their hints."""
        d = self.dialect
        with self._begin() as conn:
            exists = conn.execute(
                sa.select(batches.c.id).where(batches.c.id == batch_id).with_for_update()
            ).first()
            if exists is None:
                raise BatchNotFound(batch_id)
            retryable = sa.and_(jobs.c.batch_id == batch_id, jobs.c.state.in_(_RETRYABLE))
            rows: Sequence[Any] = conn.execute(
                sa.select(jobs.c.id, jobs.c.queue, jobs.c.priority).where(retryable)
            ).all()
            hints = [JobHint(int(i), str(q), int(p)) for i, q, p in rows]
            if hints:
                conn.execute(
                    sa.update(jobs)
                    .where(jobs.c.id.in_([h.job_id for h in hints]), retryable)
                    .values(
                        state=S.QUEUED.value,
                        run_at=d.now(),
                        finished_at=None,
                        worker_id=None,
                        lease_expires_at=None,
                    )
                )
                d.notify(conn, {h.queue for h in hints})
        return hints


def _status(row: Any, counts: dict[JobState, int]) -> BatchStatus:
    return BatchStatus(
        id=int(row["id"]),
        size=int(row["size"]),
        created_at=as_utc(row["created_at"]),
        counts=counts,
        fired_at={
            event: as_utc(row[column.name]) if row[column.name] else None
            for event, column in FIRED.items()
        },
        callbacks=callbacks_of(row["callbacks"]),
    )
