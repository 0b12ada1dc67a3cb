"""Failover: a worker whose heartbeat is older than its TTL is declared dead and its running
jobs go back to ``queued`` (``dead`` once attempts are exhausted) through fenced writes, with a
``failover_events`` row and closed ``job_assignments`` rows, all in one transaction per worker.

One at a time: the transaction opens by flipping the worker's row from ``active`` to ``dead``
under that row's lock, re-checking the staleness condition; a concurrent failover of the same
worker waits for the lock, then finds it no longer active and does nothing. Every time comes
from the database clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.states import JobState
from ledgerq.store import moves
from ledgerq.store.tables import failover_events, jobs, queue_workers
from ledgerq.store.transactions import SqlTransactions, db_time

S = JobState
W = fleet.WorkerState
_FAILED_OVER = moves.Lost(
    "failover", "the worker holding the job was declared dead", fleet.Outcome.FAILED_OVER
)


class SqlFailover(SqlTransactions):
    """Failover of dead workers and rescue of orphaned running jobs (the ``WorkerStore``
    port's ``fail_over_workers`` and ``fail_over_process``). Thread-safe."""

    def fail_over_workers(
        self, *, ttl_seconds: float, detected_by: str, force: bool = False
    ) -> list[fleet.FailoverEvent]:
        """Fail over stale active workers, then rescue running jobs of workers that are not
        active (lease expired, or all of them with ``force``); one event per worker."""
        cutoff = self.dialect.now_plus(sa.literal(-float(ttl_seconds)))
        stale_stmt = sa.select(queue_workers.c.id).where(
            queue_workers.c.state == W.ACTIVE.value, queue_workers.c.heartbeat_at < cutoff
        )
        with self._read() as conn:
            stale: list[str] = list(conn.execute(stale_stmt).scalars())
        events = []
        for worker_id in stale:
            event = self._fail_over_one(str(worker_id), cutoff, detected_by)
            if event is not None:
                events.append(event)
        events.extend(self._rescue_orphans(detected_by, force=force, ttl_seconds=ttl_seconds))
        return events

    def fail_over_process(
        self, *, hostname: str, pid: int, detected_by: str
    ) -> list[fleet.FailoverEvent]:
        """Fail over at once, whatever its heartbeat's age, every active worker registered by
        process ``pid`` of ``hostname``: its supervisor saw that process die. Same fenced
        moves and record as ``fail_over_workers``; a worker already failed over (or stopped)
        is left alone, so a concurrent lifeline never moves a job twice."""
        stmt = sa.select(queue_workers.c.id).where(
            queue_workers.c.hostname == hostname,
            queue_workers.c.pid == pid,
            queue_workers.c.state == W.ACTIVE.value,
        )
        with self._read() as conn:
            found: list[str] = list(conn.execute(stmt).scalars())
        events = []
        for worker_id in found:
            event = self._fail_over_one(str(worker_id), None, detected_by)
            if event is not None:
                events.append(event)
        return events

    def _fail_over_one(
        self, worker_id: str, cutoff: sa.ColumnElement[Any] | None, detected_by: str
    ) -> fleet.FailoverEvent | None:
        """Declare ``worker_id`` dead (only if its heartbeat is older than ``cutoff``, when
        given) and move its running jobs; None if it was not active (or beat in time)."""
        began = time.perf_counter()
        d = self.dialect
        still = [queue_workers.c.id == worker_id, queue_workers.c.state == W.ACTIVE.value]
        if cutoff is not None:
            still.append(queue_workers.c.heartbeat_at < cutoff)
        with self._begin() as conn:
            declare = (
                sa.update(queue_workers)
                .where(*still)
                .values(state=W.DEAD.value, stopped_at=d.now(), jobs_in_flight=0)
            )
            if conn.execute(declare).rowcount != 1:
                return None  # it beat in time, or someone else failed it over
            last_beat = conn.execute(
                sa.select(queue_workers.c.heartbeat_at).where(queue_workers.c.id == worker_id)
            ).scalar()
            running = sa.and_(jobs.c.worker_id == worker_id, jobs.c.state == S.RUNNING.value)
            requeued, dead = self._move_jobs(conn, running)
            return self._record_event(
                conn, worker_id, detected_by, last_beat, requeued, dead, began
            )

    def _rescue_orphans(
        self, detected_by: str, *, force: bool, ttl_seconds: float
    ) -> list[fleet.FailoverEvent]:
        """Running jobs whose worker is not an active registered worker (one that died before
        registering, was deregistered by hand, or was failed over by an older run) once their
        lease expired; and running jobs whose lease nobody renewed for a further TTL, whoever
        holds them: their owner does not know it has them (a claim committed while its reply
        was lost to a dropped connection) or its lease renewal is stuck."""
        d = self.dialect
        active = sa.select(queue_workers.c.id).where(queue_workers.c.state == W.ACTIVE.value)
        not_active = sa.or_(jobs.c.worker_id.is_(None), jobs.c.worker_id.not_in(active))
        abandoned = jobs.c.lease_expires_at < d.now_plus(sa.literal(-float(ttl_seconds)))
        if not force:
            not_active = sa.and_(not_active, jobs.c.lease_expires_at < d.now())
        orphaned = sa.and_(jobs.c.state == S.RUNNING.value, sa.or_(not_active, abandoned))
        with self._read() as conn:
            owners: set[str | None] = set(
                conn.execute(sa.select(jobs.c.worker_id).where(orphaned)).scalars()
            )
        events = []
        for owner in owners:
            began = time.perf_counter()
            with self._begin() as conn:
                owned = jobs.c.worker_id.is_(None) if owner is None else jobs.c.worker_id == owner
                requeued, dead = self._move_jobs(conn, sa.and_(orphaned, owned))
                if requeued or dead:
                    name = owner or "(no worker)"
                    events.append(
                        self._record_event(
                            conn, name, f"{detected_by} (orphans)", None, requeued, dead, began
                        )
                    )
        return events

    def _move_jobs(
        self, conn: Connection, which: sa.ColumnElement[bool]
    ) -> tuple[list[int], list[int]]:
        """Fenced moves of the running jobs ``which`` selects; return (requeued, dead) ids."""
        rows: Sequence[Any] = conn.execute(moves.running_rows(which)).all()
        requeued, dead = moves.requeue_or_bury(conn, self.dialect, rows, _FAILED_OVER)
        return [int(r.id) for r in requeued], [int(r.id) for r in dead]

    def _record_event(
        self,
        conn: Connection,
        worker_id: str,
        detected_by: str,
        last_beat: Any,
        requeued: list[int],
        dead: list[int],
        began: float,
    ) -> fleet.FailoverEvent:
        duration_ms = (time.perf_counter() - began) * 1000.0
        conn.execute(
            sa.insert(failover_events).values(
                worker_id=worker_id,
                detected_by=detected_by[:160],
                last_heartbeat_at=last_beat,
                detected_at=self.dialect.now(),
                jobs_requeued=len(requeued),
                jobs_dead=len(dead),
                job_ids=json.dumps({"requeued": requeued, "dead": dead}),
                duration_ms=duration_ms,
            )
        )
        return fleet.FailoverEvent(
            worker_id=worker_id,
            detected_by=detected_by,
            last_heartbeat_at=db_time(last_beat) if last_beat is not None else None,
            requeued=tuple(requeued),
            dead=tuple(dead),
            duration_ms=duration_ms,
        )
