"""SqlJobItems: the JobItemStore port. Every write first touches the job's row, fenced on
``(id, attempt, state = 'running')``: that both refuses a stale attempt and, by locking the
row until commit, keeps a failover from moving the job between the check and the commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.items import ItemAlreadyDone, ItemProgress, estimate
from ledgerq.core.job import Claim, as_utc
from ledgerq.store import moves
from ledgerq.store.tables import job_items, jobs
from ledgerq.store.transactions import SqlTransactions, translate_error

DONE = "done"


def _seconds(value: Any) -> float | None:
    """A duration, however the driver returns the difference of two timestamps."""
    return None if value is None else float(value)


class SqlJobItems(SqlTransactions):
    """Finished items of batch jobs, and their progress."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        d = self.dialect
        fence = moves.claim_fence()
        self._progress_stmt = sa.update(jobs).where(fence).values(progress_at=d.now())
        self._total_stmt = (
            sa.update(jobs)
            .where(fence)
            .values(progress_at=d.now(), items_total=sa.bindparam("total", type_=sa.Integer))
        )
        self._insert_stmt = sa.insert(job_items).values(
            job_id=sa.bindparam("job_id"),
            item_key=sa.bindparam("item_key"),
            state=DONE,
            attempt=sa.bindparam("item_attempt"),
            result=sa.bindparam("item_result"),
            finished_at=d.now(),
        )

    @staticmethod
    def _lost(claim: Claim) -> errors.LeaseLost:
        return errors.LeaseLost(
            f"job {claim.job_id} attempt {claim.attempt} no longer owns the job;"
            " its items were not recorded"
        )

    def begin_items(self, claim: Claim, *, total: int) -> set[str]:
        """Store the item count (fenced) and return the keys already done."""
        params = {"claim_id": claim.job_id, "claim_attempt": claim.attempt, "total": total}
        with self._begin() as conn:
            if conn.execute(self._total_stmt, params).rowcount != 1:
                raise self._lost(claim)
            keys: Sequence[Any] = (
                conn.execute(
                    sa.select(job_items.c.item_key).where(job_items.c.job_id == claim.job_id)
                )
                .scalars()
                .all()
            )
            return set(keys)

    def record_items(
        self,
        claim: Claim,
        items: Sequence[tuple[str, str | None]],
        *,
        connection: object | None = None,
    ) -> None:
        """Record items as done, fenced, in ``connection``'s transaction when given."""
        if not items:
            return
        fence = {"claim_id": claim.job_id, "claim_attempt": claim.attempt}
        rows = [
            {
                "job_id": claim.job_id,
                "item_key": key,
                "item_attempt": claim.attempt,
                "item_result": result,
            }
            for key, result in items
        ]
        try:
            with self._in(connection) as conn:
                if conn.execute(self._progress_stmt, fence).rowcount != 1:
                    raise self._lost(claim)
                try:
                    conn.execute(self._insert_stmt, rows)
                except sa.exc.IntegrityError as exc:
                    keys = ", ".join(repr(k) for k, _ in items[:3])
                    raise ItemAlreadyDone(
                        f"job {claim.job_id}: item {keys} was recorded before"
                    ) from exc
        except sa.exc.DBAPIError as exc:  # from the caller's connection
            raise translate_error(exc) from exc

    def item_progress(self, job_id: int) -> ItemProgress:
        """Done / total, and the current attempt's rate and estimated time left."""
        with self._read() as conn:
            job: Any = conn.execute(
                sa.select(jobs.c.items_total, jobs.c.attempt).where(jobs.c.id == job_id)
            ).first()
            if job is None:
                raise errors.JobNotFound(job_id)
            total, attempt = job
            done = conn.execute(
                sa.select(sa.func.count()).where(job_items.c.job_id == job_id)
            ).scalar_one()
            stats: Any = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.min(job_items.c.finished_at),
                    sa.func.max(job_items.c.finished_at),
                ).where(job_items.c.job_id == job_id, job_items.c.attempt == attempt)
            ).one()
        count, first, last = stats
        span = (as_utc(last) - as_utc(first)).total_seconds() if first and last else None
        rate, eta = estimate(total, int(done), int(count), _seconds(span))
        return ItemProgress(
            total=None if total is None else int(total),
            done=int(done),
            done_this_attempt=int(count),
            rate_per_second=rate,
            eta_seconds=eta,
            last_item_at=as_utc(last) if last else None,
        )
