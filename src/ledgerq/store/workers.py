"""SqlWorkerStore: the WorkerStore port (the fleet's registry, heartbeats, health records and
assignment history) over SQLAlchemy Core, for SQLite, PostgreSQL and MySQL.

A worker's heartbeat is refused once the fleet declared it dead, so a worker that was frozen
past its TTL learns it lost its jobs instead of carrying on as if nothing happened. Failover
lives in ``failover.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.job import as_utc
from ledgerq.core.states import JobState
from ledgerq.store.failover import FailoverMixin
from ledgerq.store.history import closing, recorded_attempts
from ledgerq.store.tables import job_assignments, jobs, queue_workers, worker_health_checks
from ledgerq.store.unknown_task_moves import UnknownTaskMixin

W = fleet.WorkerState
_ASSIGNMENT_RETRIES = 3
#: ``count_ready_jobs`` stops counting here: it only needs to know whether work is waiting.
READY_PROBE_CAP = 100


class SqlWorkerStore(FailoverMixin, UnknownTaskMixin):
    """The fleet's registry. Thread-safe; each call checks a connection out of the pool."""

    def register_worker(self, registration: fleet.Registration) -> None:
        """Insert the worker as active, or make its existing row active again."""
        d = self.dialect
        values: dict[str, Any] = {
            "hostname": registration.hostname[:255],
            "pid": registration.pid,
            "queues": ",".join(registration.queues)[:2000],
            "concurrency": registration.concurrency,
            "version": registration.version[:32],
            "state": W.ACTIVE.value,
            "started_at": d.now(),
            "heartbeat_at": d.now(),
            "stopped_at": None,
            "stop_requested": None,
            "jobs_in_flight": 0,
            "last_fetch_at": None,
            "tasks": json.dumps(sorted(registration.tasks)),
        }
        with self._begin() as conn:
            update = sa.update(queue_workers).where(queue_workers.c.id == registration.worker_id)
            if conn.execute(update.values(values)).rowcount == 0:
                row = {**values, "id": registration.worker_id, "jobs_processed": 0}
                conn.execute(sa.insert(queue_workers).values(row))

    def heartbeat_worker(self, worker_id: str, pulse: fleet.Pulse) -> fleet.HeartbeatReply | None:
        """Renew the heartbeat of an active worker; None if it is dead, stopped or unknown."""
        d = self.dialect
        values: dict[str, Any] = {
            "heartbeat_at": d.now(),
            "jobs_in_flight": pulse.jobs_in_flight,
            "jobs_processed": pulse.jobs_processed,
            "jobs_per_second": pulse.jobs_per_second,
        }
        if pulse.last_fetch_age_seconds is not None:
            values["last_fetch_at"] = d.now_plus(sa.literal(-pulse.last_fetch_age_seconds))
        stmt = (
            sa.update(queue_workers)
            .where(queue_workers.c.id == worker_id, queue_workers.c.state == W.ACTIVE.value)
            .values(values)
        )
        with self._begin() as conn:
            if conn.execute(stmt).rowcount == 0:
                return None
            row: Any = conn.execute(
                sa.select(queue_workers.c.stop_requested, queue_workers.c.queues).where(
                    queue_workers.c.id == worker_id
                )
            ).one()
            wanted, queues = row
            peers_row: Any = conn.execute(
                sa.select(
                    sa.func.avg(
                        queue_workers.c.jobs_per_second
                        / sa.cast(queue_workers.c.concurrency, sa.Float)
                    ),
                    sa.func.count(),
                ).where(queue_workers.c.state == W.ACTIVE.value, queue_workers.c.queues == queues)
            ).one()
            mean, peers = peers_row
        return fleet.HeartbeatReply(
            fleet.StopMode(wanted) if wanted else None,
            float(mean) if int(peers) > 1 and mean is not None else None,
        )

    def read_stop_request(self, worker_id: str) -> fleet.StopMode | None:
        """The stop request recorded for this active worker, if any: one read by primary key,
        on the primary (a replica's lag would delay the stop)."""
        stmt = sa.select(queue_workers.c.stop_requested).where(
            queue_workers.c.id == worker_id, queue_workers.c.state == W.ACTIVE.value
        )
        with self._single() as conn:
            wanted = conn.execute(stmt).scalar_one_or_none()
        return fleet.StopMode(wanted) if wanted else None

    def deregister_worker(self, worker_id: str) -> bool:
        """Mark a cleanly exiting worker stopped; False if it was not active any more."""
        stmt = (
            sa.update(queue_workers)
            .where(queue_workers.c.id == worker_id, queue_workers.c.state == W.ACTIVE.value)
            .values(state=W.STOPPED.value, stopped_at=self.dialect.now(), jobs_in_flight=0)
        )
        with self._begin() as conn:
            return bool(conn.execute(stmt).rowcount == 1)

    def record_health_check(self, check: fleet.HealthCheck) -> None:
        """Store one health record, stamped with the database clock."""
        row = {
            "worker_id": check.worker_id,
            "checked_at": self.dialect.now(),
            "healthy": check.healthy,
            "db_latency_ms": check.db_latency_ms,
            "transport_latency_ms": check.transport_latency_ms,
            "memory_mb": check.memory_mb,
            "cpu_percent": check.cpu_percent,
            "jobs_in_flight": check.jobs_in_flight,
            "last_fetch_age_seconds": check.last_fetch_age_seconds,
            "problems": "; ".join(check.problems)[:1000] or None,
        }
        with self._begin() as conn:
            conn.execute(sa.insert(worker_health_checks).values(row))

    def record_assignments(self, events: Sequence[fleet.AssignmentEvent]) -> None:
        """Store starts and ends of attempts in one transaction; the first end wins."""
        if not events:
            return
        for attempt in range(_ASSIGNMENT_RETRIES):
            try:
                with self._begin() as conn:
                    self._write_assignments(conn, events)
                return
            except sa.exc.IntegrityError:
                # A failover inserted the same attempt between our read and our insert;
                # the next try sees its row and only fills in what is missing.
                if attempt == _ASSIGNMENT_RETRIES - 1:
                    raise

    def _write_assignments(self, conn: Connection, events: Sequence[fleet.AssignmentEvent]) -> None:
        # Batched: one executemany per kind of row, so the history costs a few statements per
        # flush, not one per job.
        merged: dict[tuple[int, int], dict[str, Any]] = {}
        for event in events:
            row = merged.setdefault(
                (event.job_id, event.attempt),
                {
                    "a_job": event.job_id,
                    "a_attempt": event.attempt,
                    "a_worker": event.worker_id,
                    "a_started": None,
                    "a_outcome": None,
                },
            )
            if event.started_at is not None:
                row["a_started"] = self.dialect.bind_time(as_utc(event.started_at))
            if event.outcome is not None and row["a_outcome"] is None:
                row["a_outcome"] = event.outcome.value
        if self.dialect.upsert_assignments(conn, list(merged.values())):
            return
        existing = recorded_attempts(conn, [k[0] for k in merged])
        fresh = [row for key, row in merged.items() if key not in existing]
        for ended in (False, True):
            rows = [r for r in fresh if (r["a_outcome"] is not None) is ended]
            if rows:
                conn.execute(self._insert_assignment(ended=ended), rows)
        ends = [
            {"a_job": r["a_job"], "a_attempt": r["a_attempt"], "a_outcome": r["a_outcome"]}
            for key, r in merged.items()
            if key in existing and r["a_outcome"] is not None
        ]
        if ends:
            conn.execute(closing(self.dialect), ends)

    def _insert_assignment(self, *, ended: bool) -> sa.Insert:
        d = self.dialect
        started = sa.bindparam("a_started", type_=job_assignments.c.started_at.type)
        return sa.insert(job_assignments).values(
            job_id=sa.bindparam("a_job"),
            attempt=sa.bindparam("a_attempt"),
            worker_id=sa.bindparam("a_worker"),
            started_at=sa.func.coalesce(started, d.now()),
            ended_at=d.now() if ended else None,
            outcome=sa.bindparam("a_outcome") if ended else None,
        )

    def count_ready_jobs(self, queues: Sequence[str]) -> int:
        """Due queued jobs of ``queues``, counted up to ``READY_PROBE_CAP``."""
        ready = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.state == JobState.QUEUED.value,
                jobs.c.queue.in_(list(queues)),
                jobs.c.run_at <= self.dialect.now(),
            )
            .limit(READY_PROBE_CAP)
            .subquery()
        )
        with self._read() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(ready)).scalar_one())
