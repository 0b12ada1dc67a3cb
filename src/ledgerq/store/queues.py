"""SqlQueueControls: paused queues, idempotency keys, queue latency and the worker view derived
from running jobs. The claim in jobs.py reads ``paused_queues``; this module writes it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import as_utc, check_queue_name
from ledgerq.core.operations import (
    MAX_HISTORY_MINUTES,
    IdempotentRequest,
    MinuteCounts,
    PoolUse,
    ProbeResult,
    WorkerView,
)
from ledgerq.core.states import JobState
from ledgerq.store.tables import idempotency_keys, jobs, paused_queues
from ledgerq.store.transactions import SqlTransactions, translate_error


def unpaused(queue: str) -> sa.ColumnElement[bool]:
    """Claim condition, true unless ``queue`` is paused. Uncorrelated with the job row, so the
    database evaluates it once per claim and skips a paused queue's index range entirely."""
    return ~sa.exists().where(paused_queues.c.queue == queue)


class SqlQueueControls(SqlTransactions):
    """QueueControl, IdempotencyStore and FleetView over the ledger's tables."""

    def pause_queue(self, queue: str) -> None:
        """Stop claims from ``queue`` (a no-op if it is paused already)."""
        check_queue_name(queue)
        self._insert_once(paused_queues.insert().values(queue=queue, paused_at=self.dialect.now()))

    def resume_queue(self, queue: str) -> None:
        """Let workers claim from ``queue`` again (a no-op if it is not paused)."""
        check_queue_name(queue)
        with self._begin() as conn:
            conn.execute(sa.delete(paused_queues).where(paused_queues.c.queue == queue))

    def paused_queues(self) -> set[str]:
        """Names of the paused queues."""
        with self._read() as conn:
            names: Sequence[Any] = conn.execute(sa.select(paused_queues.c.queue)).scalars().all()
        return {str(q) for q in names}

    def queue_latency_seconds(self) -> dict[str, float]:
        """Per queue, seconds since its oldest due queued job became due (database clock)."""
        stmt = (
            sa.select(jobs.c.queue, sa.func.min(jobs.c.run_at), self.dialect.now())
            .where(jobs.c.state == JobState.QUEUED.value)
            .group_by(jobs.c.queue)
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
        return {str(q): max(_seconds_between(oldest, now), 0.0) for q, oldest, now in rows}

    def finished_per_minute(self, *, minutes: int) -> list[MinuteCounts]:
        """Jobs finished per minute and final state over the last ``minutes`` minutes, oldest
        first, the current minute last (``ValueError`` outside 1..``MAX_HISTORY_MINUTES``).
        One grouped statement; ``finished_at`` has no index, so it reads the finished rows the
        retention keeps (the dashboard asks once per page load)."""
        if not 1 <= minutes <= MAX_HISTORY_MINUTES:
            raise ValueError(f"minutes must be 1 to {MAX_HISTORY_MINUTES}, got {minutes}")
        d = self.dialect
        with self._read() as conn:
            current = int(conn.execute(sa.select(d.epoch_minute(d.now()))).scalar_one())
            first = current - minutes + 1
            bucket = d.epoch_minute(jobs.c.finished_at)
            stmt = (
                sa.select(bucket.label("minute"), jobs.c.state, sa.func.count())
                .where(
                    jobs.c.state.in_([s.value for s in _FINAL]),
                    jobs.c.finished_at >= d.bind_time(_minute_start(first)),
                )
                .group_by(bucket, jobs.c.state)
            )
            rows: Sequence[Any] = conn.execute(stmt).all()
        counts: dict[int, dict[str, int]] = {}
        for minute, state, n in rows:
            counts.setdefault(int(minute), {})[str(state)] = int(n)
        return [
            MinuteCounts(_minute_start(m), **counts.get(m, {})) for m in range(first, current + 1)
        ]

    def find_request(self, key: str) -> IdempotentRequest | None:
        """The record of an ``Idempotency-Key``, or None."""
        stmt = sa.select(idempotency_keys).where(idempotency_keys.c.key == key)
        with self._read() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            return None
        return IdempotentRequest(str(row["key"]), int(row["job_id"]), str(row["request_hash"]))

    def remember_request(self, request: IdempotentRequest) -> IdempotentRequest:
        """Record ``request`` unless its key is taken; return the record holding the key."""
        self._insert_once(
            idempotency_keys.insert().values(
                key=request.key,
                job_id=request.job_id,
                request_hash=request.request_hash,
                created_at=self.dialect.now(),
            )
        )
        found = self.find_request(request.key)
        return found if found is not None else request

    def list_workers(self, *, include_inactive: bool = False) -> list[WorkerView]:
        """Workers that hold running jobs, derived from the jobs table (the fleet registry
        replaces this once it exists): one row per worker_id with its job count. Without a
        registry no stopped or dead worker is known, so ``include_inactive`` adds none."""
        stmt = (
            sa.select(
                jobs.c.worker_id,
                sa.func.count(),
                sa.func.max(jobs.c.heartbeat_at),
            )
            .where(jobs.c.state == JobState.RUNNING.value, jobs.c.worker_id.is_not(None))
            .group_by(jobs.c.worker_id)
        )
        queues_stmt = (
            sa.select(jobs.c.worker_id, jobs.c.queue)
            .where(jobs.c.state == JobState.RUNNING.value, jobs.c.worker_id.is_not(None))
            .distinct()
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
            pairs: Sequence[Any] = conn.execute(queues_stmt).all()
        queues: dict[str, set[str]] = {}
        for worker_id, queue in pairs:
            queues.setdefault(str(worker_id), set()).add(str(queue))
        views = [
            WorkerView(
                worker_id=str(worker_id),
                running_jobs=int(count),
                last_heartbeat_at=as_utc(seen) if isinstance(seen, datetime) else None,
                queues=tuple(sorted(queues.get(str(worker_id), ()))),
            )
            for worker_id, count, seen in rows
        ]
        views.sort(
            key=lambda v: v.last_heartbeat_at.timestamp() if v.last_heartbeat_at else 0.0,
            reverse=True,
        )
        return views

    def check_database(self) -> ProbeResult:
        """Whether the database answers a trivial query."""
        try:
            with self._read() as conn:
                conn.execute(sa.select(sa.literal(1))).scalar()
        except errors.StoreError as exc:  # a probe reports, never raises
            return ProbeResult("database", False, str(exc).splitlines()[0][:200])
        return ProbeResult("database", True)

    def _insert_once(self, stmt: sa.Insert) -> None:
        """Run an insert in its own transaction; a primary-key clash means already there."""
        try:
            with self.engine.begin() as conn:
                conn.execute(stmt)
        except sa.exc.IntegrityError:
            return
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc


_FINAL = (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)


def _minute_start(epoch_minute: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(minutes=epoch_minute)


def _seconds_between(earlier: Any, later: Any) -> float:
    if isinstance(earlier, str):  # SQLite returns its clock as text
        earlier = datetime.fromisoformat(earlier)
    if isinstance(later, str):
        later = datetime.fromisoformat(later)
    if not isinstance(earlier, datetime) or not isinstance(later, datetime):
        return 0.0
    return (as_utc(later) - as_utc(earlier)).total_seconds()


def pool_use(engine: sa.Engine, kept: int = 0) -> PoolUse:
    """How ``engine``'s pool is used now; all zero for pools without a limit (SQLite's).
    ``kept``: connections checked out but idle, kept between the fast path's statements (not
    counted as in use)."""
    pool = engine.pool
    if isinstance(pool, sa.pool.QueuePool):
        size = pool.size()
        return PoolUse(
            checked_out=max(pool.checkedout() - kept, 0),
            size=size,
            overflow=max(pool.overflow(), 0),  # SQLAlchemy counts up from -size
            most=size + max(pool._max_overflow, 0),
        )
    return PoolUse()
