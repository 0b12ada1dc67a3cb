"""SqlFleetOperations: what operators do to the fleet (list, stop, deregister, clean up, read
health and the failover record) over the tables the workers write (``workers.py``). Stop
requests are rows, so they reach workers on every host that can reach the database."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import fleet
from ledgerq.core.retention import HistoryRetention, HistoryTable
from ledgerq.store.failover import SqlFailover
from ledgerq.store.history_pruning import SqlHistoryPruner
from ledgerq.store.tables import failover_events, queue_workers, worker_health_checks
from ledgerq.store.transactions import SqlTransactions, db_time

W = fleet.WorkerState
_DAY = 86400.0


def _age(now: Any, then: Any) -> float | None:
    if then is None:
        return None
    return max((db_time(now) - db_time(then)).total_seconds(), 0.0)


class SqlFleetOperations(SqlTransactions):
    """Operator actions on the fleet. Deregistering fails over through ``failover``.
    Thread-safe."""

    def __init__(self, engine: sa.Engine, failover: SqlFailover) -> None:
        super().__init__(engine)
        self._failover = failover

    def list_workers(self, *, include_inactive: bool = False) -> list[fleet.WorkerRecord]:
        """Registered workers, oldest first; only active ones unless ``include_inactive``."""
        stmt = sa.select(*queue_workers.c, self.dialect.now().label("db_now")).order_by(
            queue_workers.c.started_at, queue_workers.c.id
        )
        if not include_inactive:
            stmt = stmt.where(queue_workers.c.state == W.ACTIVE.value)
        with self._read() as conn:
            rows = list(conn.execute(stmt).mappings())
        return [self._worker(r) for r in rows]

    def get_worker(self, worker_id: str) -> fleet.WorkerRecord | None:
        """One registered worker, or None."""
        stmt = sa.select(*queue_workers.c, self.dialect.now().label("db_now")).where(
            queue_workers.c.id == worker_id
        )
        with self._read() as conn:
            row = conn.execute(stmt).mappings().first()
        return self._worker(row) if row is not None else None

    @staticmethod
    def _worker(r: Any) -> fleet.WorkerRecord:
        return fleet.WorkerRecord(
            worker_id=r["id"],
            hostname=r["hostname"],
            pid=int(r["pid"]),
            queues=tuple(q for q in r["queues"].split(",") if q),
            concurrency=int(r["concurrency"]),
            version=r["version"],
            state=W(r["state"]),
            started_at=db_time(r["started_at"]),
            heartbeat_at=db_time(r["heartbeat_at"]),
            heartbeat_age_seconds=_age(r["db_now"], r["heartbeat_at"]) or 0.0,
            stopped_at=db_time(r["stopped_at"]) if r["stopped_at"] is not None else None,
            stop_requested=fleet.StopMode(r["stop_requested"]) if r["stop_requested"] else None,
            jobs_in_flight=int(r["jobs_in_flight"]),
            jobs_processed=int(r["jobs_processed"]),
            last_fetch_age_seconds=_age(r["db_now"], r["last_fetch_at"]),
        )

    def latest_health_checks(self, worker_ids: Sequence[str]) -> dict[str, fleet.HealthRecord]:
        """The newest health record of each named worker (absent if it has none)."""
        t = worker_health_checks
        newest = (
            sa.select(sa.func.max(t.c.id))
            .where(t.c.worker_id.in_(list(worker_ids)))
            .group_by(t.c.worker_id)
        )
        stmt = sa.select(*t.c, self.dialect.now().label("db_now")).where(t.c.id.in_(newest))
        with self._read() as conn:
            rows = list(conn.execute(stmt).mappings())
        found = {}
        for r in rows:
            check = fleet.HealthCheck(
                worker_id=r["worker_id"],
                db_latency_ms=r["db_latency_ms"],
                transport_latency_ms=r["transport_latency_ms"],
                memory_mb=r["memory_mb"],
                cpu_percent=r["cpu_percent"],
                jobs_in_flight=int(r["jobs_in_flight"]),
                last_fetch_age_seconds=r["last_fetch_age_seconds"],
                problems=tuple(p for p in (r["problems"] or "").split("; ") if p),
            )
            found[r["worker_id"]] = fleet.HealthRecord(
                check, db_time(r["checked_at"]), _age(r["db_now"], r["checked_at"]) or 0.0
            )
        return found

    def request_stop(self, *, worker_id: str | None, mode: fleet.StopMode) -> int:
        """Ask one active worker (or all, with ``worker_id`` None) to stop; return how many
        were asked. Each notices at its next heartbeat."""
        stmt = (
            sa.update(queue_workers)
            .where(queue_workers.c.state == W.ACTIVE.value)
            .values(stop_requested=mode.value)
        )
        if worker_id is not None:
            stmt = stmt.where(queue_workers.c.id == worker_id)
        with self._begin() as conn:
            return int(conn.execute(stmt).rowcount)

    def remove_worker(self, worker_id: str, *, detected_by: str) -> fleet.FailoverEvent | None:
        """Deregister a worker by hand: fail over its running jobs at once (fenced) and delete
        its row. If the process still runs, its next heartbeat is refused and it re-registers.
        Raise ``LookupError`` if no such worker is registered."""
        with self._begin() as conn:
            found = conn.execute(
                sa.update(queue_workers)
                .where(queue_workers.c.id == worker_id)
                .values(heartbeat_at=self.dialect.now_plus(sa.literal(-10.0 * _DAY)))
            ).rowcount
        if not found:
            raise LookupError(worker_id)
        events = self._failover.fail_over_workers(ttl_seconds=_DAY, detected_by=detected_by)
        with self._begin() as conn:
            conn.execute(sa.delete(queue_workers).where(queue_workers.c.id == worker_id))
        return next((e for e in events if e.worker_id == worker_id), None)

    def remove_crashed_workers(self, *, ttl_seconds: float, detected_by: str) -> int:
        """Fail over stale workers, then delete the rows of dead and stopped workers; their
        history stays in ``failover_events`` and ``job_assignments``. Return rows deleted."""
        self._failover.fail_over_workers(ttl_seconds=ttl_seconds, detected_by=detected_by)
        stmt = sa.delete(queue_workers).where(
            queue_workers.c.state.in_([W.DEAD.value, W.STOPPED.value])
        )
        with self._begin() as conn:
            return int(conn.execute(stmt).rowcount)

    def delete_health_checks(self, *, older_than_days: float) -> int:
        """Delete health records older than ``older_than_days``, a chunk per transaction;
        return how many."""
        return self._prune(HistoryTable.HEALTH_CHECKS, older_than_days)

    def delete_failover_events(self, *, older_than_days: float) -> int:
        """Delete failover events older than ``older_than_days``, a chunk per transaction;
        return how many."""
        return self._prune(HistoryTable.FAILOVER_EVENTS, older_than_days)

    def _prune(self, table: HistoryTable, older_than_days: float) -> int:
        pruner, chunk, total = SqlHistoryPruner(self.engine), HistoryRetention().chunk, 0
        while True:
            gone = pruner.prune_history(
                table, older_than_seconds=older_than_days * _DAY, limit=chunk
            )
            total += gone
            if gone < chunk:
                return total

    def count_failover_events(self) -> int:
        """How many failover events the ledger records (kept until cleaned up)."""
        with self._read() as conn:
            found = conn.execute(sa.select(sa.func.count()).select_from(failover_events))
            return int(found.scalar() or 0)

    def list_failover_events(
        self, *, limit: int = 50, worker_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest failover events as plain data (of ``worker_id`` alone, when given)."""
        t = failover_events
        stmt = sa.select(*t.c).order_by(t.c.id.desc()).limit(limit)
        if worker_id is not None:
            stmt = stmt.where(t.c.worker_id == worker_id)
        with self._read() as conn:
            rows = list(conn.execute(stmt).mappings())
        return [
            {
                **dict(r),
                "job_ids": json.loads(r["job_ids"]),
                "detected_at": db_time(r["detected_at"]),
            }
            for r in rows
        ]

    def probe_database(self) -> dict[str, Any]:
        """A round trip's latency (ms), the server's connection limit and this process's
        pool size (base connections; as many again may overflow)."""
        began = time.perf_counter()
        with self._read() as conn:
            conn.execute(sa.select(1)).scalar()
            limit = self.dialect.max_connections(conn)
        pool = self.engine.pool
        size = pool.size() if hasattr(pool, "size") else None
        return {
            "latency_ms": round((time.perf_counter() - began) * 1000.0, 2),
            "max_connections": limit,
            "pool_size": size,
        }
