"""SqlWorkerRegistry: the fleet's registry as a worker process writes it (registration,
heartbeats, stop requests, health records) over SQLAlchemy Core, for SQLite, PostgreSQL and
MySQL.

A worker's heartbeat is refused once the fleet declared it dead, so a worker that was frozen
past its TTL learns it lost its jobs instead of carrying on as if nothing happened. Failover
lives in ``failover.py``, the attempts' history in ``assignment_history.py``; ``SqlFleetAdmin``
(``fleet_admin.py``) puts them together behind the ``WorkerStore`` port.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import fleet
from ledgerq.core.states import JobState
from ledgerq.store.tables import jobs, queue_workers, worker_health_checks
from ledgerq.store.transactions import SqlTransactions

W = fleet.WorkerState
#: ``count_ready_jobs`` stops counting here: it only needs to know whether work is waiting.
READY_PROBE_CAP = 100


class SqlWorkerRegistry(SqlTransactions):
    """The fleet's registry as workers write it. Thread-safe; each call checks a connection
    out of the pool."""

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
