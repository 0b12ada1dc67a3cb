"""SqlJobStore: the JobStore port over SQLAlchemy Core, for SQLite, PostgreSQL and MySQL.

Every write of a running job is fenced on ``(id, attempt, state = 'running')`` (see
``moves``) and reports per job whether it applied; that is what keeps a zombie worker from
overwriting a new owner.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.bulk import JobBatch
from ledgerq.core.job import Claim, EnqueueResult, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store import batch_hook, idempotent, moves, workflow_advance
from ledgerq.store.claims import SqlJobClaims
from ledgerq.store.completion_hooks import Announce, CompletionHook, run_hooks
from ledgerq.store.dedupe import DedupeWindows
from ledgerq.store.history import held_attempts, record_put_back
from ledgerq.store.job_operations import SqlJobOperations
from ledgerq.store.job_rows import bulk_rows, job_values
from ledgerq.store.staging import SqlJobStaging
from ledgerq.store.tables import jobs

_Item = TypeVar("_Item")

S = JobState


class SqlJobStore(SqlJobClaims, SqlJobStaging, SqlJobOperations):
    """The SQL ledger of jobs. Thread-safe; each call checks a connection out of the pool.

    One level of parts over the shared transactions: claims (``claims.py``), staging and
    upkeep (``staging.py``) and operator actions (``job_operations.py``); the producer's inserts
    and the worker's fenced writes are here."""

    def __init__(
        self,
        engine: sa.Engine,
        relaxed_engine: sa.Engine | None = None,
        *,
        hooks: Sequence[CompletionHook] = (batch_hook.HOOK, workflow_advance.HOOK),
        announce: Announce | None = None,
    ) -> None:
        """``relaxed_engine`` (optional) serves claims and heartbeats, whose commits need not
        wait for the disk (see ``engine.create_engine``); everything else uses ``engine``.
        ``hooks`` run in the transaction of the completions they concern, in this order;
        ``announce`` (optional) gets what they queued or emitted once it committed."""
        super().__init__(engine, relaxed_engine)
        self._hooks = tuple(hooks)
        self.announce = announce
        d = self.dialect
        self._delay = sa.bindparam("delay_s", type_=sa.Float)
        self._bulk_insert_stmt = (
            sa.insert(jobs)
            .values(created_at=d.now(), run_at=d.now_plus(self._delay))
            .returning(jobs.c.id, sort_by_parameter_order=True)
        )
        self._finish_stmt = moves.finish(d)
        self._retry_stmt = moves.retry(d)
        self._start_stmt = (
            sa.update(jobs)
            .where(moves.claim_fence(), jobs.c.started_at.is_(None))
            .values(started_at=d.now_plus(-sa.cast(sa.bindparam("ago_s"), sa.Float)))
        )
        self._heartbeat_stmt = (
            sa.update(jobs)
            .where(moves.claim_fence())
            .values(
                heartbeat_at=d.now(),
                lease_expires_at=d.now_plus(sa.bindparam("lease_s", type_=sa.Float)),
            )
        )
        unstarted = sa.bindparam("unstarted", type_=sa.Integer)
        self._requeue_stmt = moves.put_back(moves.claim_fence(), unstarted)

    # -- producer side -------------------------------------------------------------------

    def insert_jobs(
        self,
        new_jobs: Sequence[NewJob],
        *,
        connection: object | None = None,
        on_commit: Callable[[list[EnqueueResult]], None] | None = None,
    ) -> list[EnqueueResult]:
        """Insert jobs; plain ones in one bulk statement, deduplicated ones one by one.

        ``on_commit`` runs after the rows committed: at once without ``connection``, else when
        the caller's transaction commits (never if it rolls back)."""
        results = self._insert(new_jobs, connection)
        if on_commit is not None:
            if isinstance(connection, Connection) and connection.in_transaction():
                sa.event.listen(connection, "commit", lambda _conn: on_commit(results), once=True)
            else:
                on_commit(results)
        return results

    def _insert(self, new_jobs: Sequence[NewJob], connection: object | None) -> list[EnqueueResult]:
        # A batch's jobs share everything but their arguments: its template answers for all.
        alike = [new_jobs.template] if isinstance(new_jobs, JobBatch) else new_jobs
        if any(j.idempotency_key is not None and j.dedupe_key is None for j in alike):
            with self._in(connection) as conn:
                return self._insert_in_runs(conn, new_jobs)
        alone = (
            connection is None
            and self.dialect.inserts_alone
            and all(
                j.dedupe_key is None and j.run_at is None and j.expires_at is None for j in alike
            )
        )
        if alone:
            ids = self.dialect.insert_alone(self, bulk_rows(self.dialect, new_jobs))
            if ids is not None:
                return [EnqueueResult(job_id) for job_id in ids]
        results: dict[int, EnqueueResult] = {}
        plain = [(i, j) for i, j in enumerate(new_jobs) if j.dedupe_key is None]
        with self._in(connection) as conn:
            if plain:
                ids = self._insert_bulk(conn, [j for _, j in plain])
                results.update(
                    {i: EnqueueResult(job_id) for (i, _), job_id in zip(plain, ids, strict=True)}
                )
            for i, job in enumerate(new_jobs):
                if job.dedupe_key is not None:
                    results[i] = self._insert_deduplicated(conn, job)
            ready = {j.queue for j in new_jobs if j.initial_state is S.QUEUED}
            if self.dialect.insert_notifies:
                ready -= {j.queue for _, j in plain if j.run_at is None}
            if ready:
                self.dialect.notify(conn, ready)
        return [results[i] for i in range(len(new_jobs))]

    def _insert_in_runs(self, conn: Connection, new_jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Jobs with idempotency keys among others (the spool's replay): each run of one kind
        is inserted in turn, so the ids follow the input order (a producer's order)."""
        results: list[EnqueueResult] = []
        for kind, run in itertools.groupby(new_jobs, key=_insert_kind):
            jobs_of_run = list(run)
            if kind == "keyed":
                results += idempotent.insert_keyed(
                    conn, self.dialect, jobs_of_run, self._insert_bulk
                )
            elif kind == "deduplicated":
                results += [self._insert_deduplicated(conn, job) for job in jobs_of_run]
            else:
                results += [EnqueueResult(i) for i in self._insert_bulk(conn, jobs_of_run)]
        ready = {j.queue for j in new_jobs if j.initial_state is S.QUEUED}
        if ready:
            self.dialect.notify(conn, ready)
        return results

    def _insert_bulk(self, conn: Connection, new_jobs: Sequence[NewJob]) -> list[int]:
        d = self.dialect
        ids: list[int] = []
        timed = [j for j in new_jobs if j.run_at is not None or j.expires_at is not None]
        if timed:
            # Rare: explicit run_at. Insert one by one to keep the common path a single statement.
            for job in new_jobs:
                stmt = sa.insert(jobs).values(job_values(self.dialect, job)).returning(jobs.c.id)
                ids.append(int(conn.execute(stmt).scalar_one()))
            return ids
        params = bulk_rows(self.dialect, new_jobs)
        fast = d.insert_plain(conn, params)
        if fast is not None:
            return fast
        inserted: Sequence[Any] = conn.execute(self._bulk_insert_stmt, params).scalars().all()
        return [int(i) for i in inserted]

    def _insert_deduplicated(self, conn: Connection, job: NewJob) -> EnqueueResult:
        # A window (dedupe_for) holds the key even once its job finished: see store/dedupe.py.
        assert job.dedupe_key is not None
        windows = DedupeWindows(self.dialect)
        if job.dedupe_for_seconds is None:
            holder = windows.holder(conn, job.dedupe_key)
            if holder is not None:
                return EnqueueResult(holder, duplicate=True)
            return self._insert_unless_unfinished(conn, job)
        for _ in range(2):  # the window may expire between a failed take and the lookup
            if windows.take(conn, job.dedupe_key, job.dedupe_for_seconds):
                result = self._insert_unless_unfinished(conn, job)
                windows.attach(conn, job.dedupe_key, result.job_id)
                return result
            holder = windows.holder(conn, job.dedupe_key)
            if holder is not None:
                return EnqueueResult(holder, duplicate=True)
        raise errors.StoreError(f"could not take the dedupe window of {job.dedupe_key!r}")

    def _insert_unless_unfinished(self, conn: Connection, job: NewJob) -> EnqueueResult:
        # Two tries: the holder of the key may finish between our insert and our lookup.
        for _ in range(2):
            job_id = self.dialect.insert_unless_duplicate(conn, job_values(self.dialect, job))
            if job_id is not None:
                return EnqueueResult(job_id)
            existing = conn.execute(
                sa.select(jobs.c.id).where(jobs.c.dedupe_active == job.dedupe_key)
            ).scalar()
            if existing is not None:
                return EnqueueResult(int(existing), duplicate=True)
        raise errors.StoreError(f"could not insert job with dedupe key {job.dedupe_key!r}")

    # -- worker side -----------------------------------------------------------------------

    def complete_jobs(self, completions: Sequence[Completion]) -> list[bool]:
        """Write a group of outcomes in one transaction; one bool per item (fenced)."""
        return in_id_order(completions, lambda c: c.claim.job_id, self._complete_sorted)

    def _complete_sorted(self, completions: Sequence[Completion]) -> list[bool]:
        params = [
            {
                "claim_id": c.claim.job_id,
                "claim_attempt": c.claim.attempt,
                "new_state": c.state.value,
                "new_result": c.result_json,
                "new_error": c.error_json,
                "retry_delay": c.retry_delay_seconds,
                "ran_s": c.ran_seconds,
            }
            for c in completions
        ]
        hooks = [h for h in self._hooks if h.concerns(completions)]
        if not hooks:
            alone = self.dialect.complete_alone(self, params)
            if alone is not None:
                return alone
        row_by_row = any(h.row_by_row for h in hooks)
        with self._begin() as conn:
            applied = None if row_by_row else self.dialect.complete_group(conn, params)
            if applied is None:
                applied = self._complete_each(conn, params)
                ends = [
                    (c.claim.job_id, c.claim.attempt, c.state.value)
                    for c, ok in zip(completions, applied, strict=True)
                    if ok
                ]
                self.dialect.end_assignments(conn, ends)
            # A batch's callbacks and a step's ready dependents are decided in the
            # transaction of the outcomes that make them due.
            commit = run_hooks(conn, self.dialect, hooks, completions, applied)
        if commit and self.announce is not None:
            self.announce(commit)  # committed: readers woken now see the change
        return applied

    def _complete_each(self, conn: Connection, params: list[dict[str, Any]]) -> list[bool]:
        return [
            conn.execute(
                self._retry_stmt if p["new_state"] == S.FAILED.value else self._finish_stmt, p
            ).rowcount
            == 1
            for p in params
        ]

    def mark_started(self, starts: Sequence[tuple[Claim, float]]) -> list[bool]:
        """Record that the bodies of running attempts started ``ago`` seconds before now
        (``(claim, ago)`` pairs); one bool per pair (fenced; a start already written stays)."""
        return in_id_order(starts, lambda s: s[0].job_id, self._mark_started_sorted)

    def _mark_started_sorted(self, starts: Sequence[tuple[Claim, float]]) -> list[bool]:
        params = [
            {"claim_id": c.job_id, "claim_attempt": c.attempt, "ago_s": max(ago, 0.0)}
            for c, ago in starts
        ]
        with self._begin() as conn:
            return self.dialect.update_many(conn, self._start_stmt, params)

    def heartbeat_jobs(self, claims: Sequence[Claim], *, lease_seconds: float) -> list[bool]:
        """Extend the lease of running attempts; one bool per claim (fenced)."""
        return in_id_order(
            claims,
            _claim_id,
            lambda sorted_claims: self._heartbeat_sorted(sorted_claims, lease_seconds),
        )

    def _heartbeat_sorted(self, claims: Sequence[Claim], lease_seconds: float) -> list[bool]:
        ids, attempts = [c.job_id for c in claims], [c.attempt for c in claims]
        alone = self.dialect.heartbeat_alone(self, ids, attempts, lease_seconds)
        if alone is not None:
            return alone
        params = [
            {"claim_id": i, "claim_attempt": a, "lease_s": lease_seconds}
            for i, a in zip(ids, attempts, strict=True)
        ]
        with self._begin() as conn:
            return self.dialect.update_many(conn, self._heartbeat_stmt, params)

    def requeue_jobs(
        self, claims: Sequence[Claim], *, unstarted: Collection[Claim] = ()
    ) -> list[bool]:
        """Put running attempts back to queued; one bool per claim (fenced). Those also in
        ``unstarted`` cost no attempt (``moves.put_back``); one statement for both kinds, so
        the rows are still written in id order."""
        skipped = frozenset(unstarted)
        return in_id_order(
            claims, _claim_id, lambda sorted_claims: self._requeue_sorted(sorted_claims, skipped)
        )

    def _requeue_sorted(self, claims: Sequence[Claim], unstarted: frozenset[Claim]) -> list[bool]:
        params = [
            {"claim_id": c.job_id, "claim_attempt": c.attempt, "unstarted": int(c in unstarted)}
            for c in claims
        ]
        with self._begin() as conn:
            held = held_attempts(conn, claims)  # the holders, before the put-back clears them
            applied = self.dialect.update_many(conn, self._requeue_stmt, params)
            ended = [
                held[c.job_id]
                for c, ok in zip(claims, applied, strict=True)
                if ok and c.job_id in held
            ]
            record_put_back(conn, self.dialect, ended)
            queues = conn.execute(
                sa.select(jobs.c.queue).where(jobs.c.id.in_([c.job_id for c in claims])).distinct()
            )
            self.dialect.notify(conn, set(queues.scalars()))
        return applied


def _claim_id(claim: Claim) -> int:
    return claim.job_id


def _insert_kind(job: NewJob) -> str:
    if job.dedupe_key is not None:
        return "deduplicated"
    return "plain" if job.idempotency_key is None else "keyed"


def in_id_order(
    items: Sequence[_Item],
    job_id: Callable[[_Item], int],
    write: Callable[[list[_Item]], list[bool]],
) -> list[bool]:
    """Run ``write`` over ``items`` sorted by job id and return its flags in the input order.
    Writers of several running jobs lock rows in ascending id order, so two of them (a
    worker's heartbeat and its completer) never deadlock, row by row as in one statement."""
    order = sorted(range(len(items)), key=lambda i: job_id(items[i]))
    done = write([items[i] for i in order])
    flags = [False] * len(items)
    for position, index in enumerate(order):
        flags[index] = done[position]
    return flags
