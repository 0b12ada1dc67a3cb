"""Claims: the atomic ``queued -> running`` move of due jobs, by query (priority, then age)
or among ids a transport handed over; the driver runs them (on PostgreSQL on psycopg
directly, see postgres/fast.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core.job import Job
from ledgerq.core.states import JobState
from ledgerq.store.queues import unpaused
from ledgerq.store.tables import jobs, paused_queues
from ledgerq.store.transactions import SqlTransactions

S = JobState


class SqlJobClaims(SqlTransactions):
    """The worker's side of the ledger that takes jobs; thread-safe."""

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        super().__init__(engine, relaxed_engine)
        self._claims: dict[tuple[str, ...], Any] = {}

    def claim_jobs(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        limit: int,
        lease_seconds: float,
        job_ids: Sequence[int] | None = None,
    ) -> list[Job]:
        """Atomically move up to ``limit`` due queued jobs to running (priority, then age);
        with ``job_ids``, only jobs among those (of ``queues``) are candidates."""
        key = (*queues, "") if job_ids is not None else tuple(queues)
        built = self._claims.get(key)
        if built is None:
            parts = (
                self._hinted_claim_parts(tuple(queues))
                if job_ids is not None
                else self._claim_parts(tuple(queues))
            )
            built = self._claims[key] = self.dialect.build_claim(*parts)
        params = {
            "claim_limit": limit,
            "candidate_limit": 2 * limit,
            "claim_worker": worker_id,
            "lease_s": float(lease_seconds),
        }
        if job_ids is not None:
            if not job_ids:
                return []
            params["hint_ids"] = list(job_ids)
            rows = self.dialect.claim_ids(self, built, params, queues)
        else:
            rows = self.dialect.claim(self, built, params)
        claimed = [Job.from_row(r) for r in rows]
        claimed.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return claimed

    def _claim_parts(self, queues: tuple[str, ...]) -> tuple[sa.Select[Any], dict[str, Any]]:
        """The selection and the new values of a claim of ``queues``, with bound parameters
        ``claim_limit``, ``candidate_limit``, ``claim_worker`` and ``lease_s``."""
        d = self.dialect
        order = (jobs.c.priority, jobs.c.run_at, jobs.c.id)
        # The state is a literal, not a parameter: a generic plan (PostgreSQL settles on one
        # after a few calls) sees no parameter values, and only a literal lets it use the
        # partial index of queued rows instead of sorting every queued row per claim.
        queued: sa.ColumnClause[str] = sa.literal_column(f"'{S.QUEUED.value}'")
        ready = sa.and_(jobs.c.state == queued, jobs.c.run_at <= d.now())
        if len(queues) == 1:
            picked = sa.select(jobs.c.id).where(
                ready, jobs.c.queue == queues[0], unpaused(queues[0])
            )
        else:
            # One index range per queue, merged: a single ORDER BY over several queues would
            # sort every queued row of them on each claim.
            per_queue = [
                sa.select(jobs.c.id)
                .where(ready, jobs.c.queue == queue, unpaused(queue))
                .order_by(*order)
                .limit(sa.bindparam("candidate_limit", type_=sa.Integer))
                .subquery()
                for queue in queues
            ]
            candidates = sa.union_all(*(sa.select(sub.c.id) for sub in per_queue)).subquery()
            picked = sa.select(jobs.c.id).where(jobs.c.id.in_(sa.select(candidates.c.id)))
            if d.rechecks_candidates:
                # Re-checked on the locked row version (rows are locked after the candidates
                # were read). Wrapped in IS TRUE, which no index serves: the candidates are
                # reached by primary key, never by a scan of every queued row.
                picked = picked.where(ready.is_(sa.true()))
        picked = picked.order_by(*order).limit(sa.bindparam("claim_limit", type_=sa.Integer))
        return picked, self._claim_values()

    def _hinted_claim_parts(self, queues: tuple[str, ...]) -> tuple[sa.Select[Any], dict[str, Any]]:
        """Like ``_claim_parts``, but the candidates are the bound ``hint_ids``: the primary
        key finds them, and ids of other queues, finished or unknown jobs fall away."""
        d = self.dialect
        ids: sa.BindParameter[Any] = sa.bindparam("hint_ids", expanding=True)
        picked = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.id.in_(ids),
                jobs.c.state == S.QUEUED.value,
                jobs.c.run_at <= d.now(),
                jobs.c.queue.in_(queues),
                ~sa.exists().where(paused_queues.c.queue == jobs.c.queue),
            )
            .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
            .limit(sa.bindparam("claim_limit", type_=sa.Integer))
        )
        return picked, self._claim_values()

    def _claim_values(self) -> dict[str, Any]:
        d = self.dialect
        return {
            "state": S.RUNNING.value,
            "attempt": jobs.c.attempt + 1,
            "worker_id": sa.bindparam("claim_worker", type_=sa.String),
            "claimed_at": d.now(),
            "started_at": None,  # set once the body starts (see ``mark_started``)
            "heartbeat_at": d.now(),
            "lease_expires_at": d.now_plus(sa.bindparam("lease_s", type_=sa.Float)),
            "finished_at": None,
        }
