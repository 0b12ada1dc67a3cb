"""Claims: the atomic ``queued -> running`` move of due jobs, by query (priority, then age)
or among ids a transport handed over; on PostgreSQL one statement that also opens each
attempt's history row, run on psycopg directly (see pg_fast)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core.job import Job
from ledgerq.core.states import JobState
from ledgerq.store import pg_statements as pg
from ledgerq.store.pg_fast import FastStatements
from ledgerq.store.queues import unpaused
from ledgerq.store.staging import SqlJobStaging
from ledgerq.store.tables import jobs, paused_queues

S = JobState


class SqlJobClaims(SqlJobStaging):
    """The worker's side of the ledger that takes jobs; thread-safe."""

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        super().__init__(engine, relaxed_engine)
        self._claims: dict[tuple[str, ...], Any] = {}
        # PostgreSQL's claims, group completions and heartbeats skip SQLAlchemy's execution
        # machinery (see pg_fast); the other dialects and every other statement use it.
        self._fast = (
            FastStatements(engine, relaxed_engine) if FastStatements.supports(engine) else None
        )

    @property
    def records_history_inline(self) -> bool:
        """Whether completions write the ended attempts' history rows themselves."""
        return self.dialect.records_history_inline

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
            rows: Sequence[Mapping[Any, Any]]
            if self._fast is not None:
                values = pg.hinted_claim_values(params, queues)
                rows = self._fast.mappings(pg.CLAIM_HINTED, values, generic_plans=True)
            elif self.dialect.claims_hints_natively:
                with self._single(relaxed=True) as conn:
                    rows = self.dialect.claim_hinted(conn, params, queues)
            if self.dialect.claims_hints_natively:
                return sorted(
                    (Job.from_row(r) for r in rows), key=lambda j: (j.priority, j.run_at, j.id)
                )
        if self._fast is not None:
            rows = self._fast.mappings(built, params, relaxed=True)
        else:
            # MySQL's claim is several statements and needs a real transaction.
            mysql = self.dialect.name == "mysql"
            with self._begin() if mysql else self._single(relaxed=True) as conn:
                rows = self.dialect.run_claim(conn, built, params)
        claimed = [Job.from_row(r) for r in rows]
        claimed.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return claimed

    def _claim_parts(self, queues: tuple[str, ...]) -> tuple[sa.Select[Any], dict[str, Any]]:
        """The selection and the new values of a claim of ``queues``, with bound parameters
        ``claim_limit``, ``candidate_limit``, ``claim_worker`` and ``lease_s``."""
        d = self.dialect
        order = (jobs.c.priority, jobs.c.run_at, jobs.c.id)
        ready = sa.and_(jobs.c.state == S.QUEUED.value, jobs.c.run_at <= d.now())
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
            if d.name != "sqlite":
                # Re-checked on the locked row version (PostgreSQL and MySQL lock after the
                # candidates were read); SQLite holds the write lock for the whole claim, and
                # there the extra condition would steer the planner off the primary key.
                picked = picked.where(ready)
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
