"""SqlFleetAdmin: the fleet's store as one object, composed of the parts that each own one
concern over the same engine:

- ``SqlWorkerRegistry`` (``workers.py``): registration, heartbeats, stop requests as workers
  read them, health records, the ready-jobs probe;
- ``SqlFailover`` (``failover.py``): failing over dead workers, rescuing orphaned jobs;
- ``SqlUnknownTaskMoves`` (``unknown_task_moves.py``): putting back jobs of unknown tasks;
- ``SqlAssignmentHistory`` (``assignment_history.py``): the attempts' history;
- ``SqlFleetOperations`` (``fleet_operations.py``): what operators do (list, stop, remove,
  clean up, read health and the failover record).

It implements the ``WorkerStore`` port for the runtime and the operator surface for the CLI and
the admin API, each method handing over to the part that owns it; a caller that needs one
concern only may hold that part instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core import fleet, unknown_tasks
from ledgerq.core.job import Claim
from ledgerq.store.assignment_history import SqlAssignmentHistory
from ledgerq.store.failover import SqlFailover
from ledgerq.store.fleet_operations import SqlFleetOperations
from ledgerq.store.unknown_task_moves import SqlUnknownTaskMoves
from ledgerq.store.workers import SqlWorkerRegistry


class SqlFleetAdmin:
    """The ``WorkerStore`` port and the operators' fleet actions, over one engine. Thread-safe;
    each call checks a connection out of the pool."""

    def __init__(self, engine: sa.Engine) -> None:
        self.registry = SqlWorkerRegistry(engine)
        self.failover = SqlFailover(engine)
        self.unknown_tasks = SqlUnknownTaskMoves(engine)
        self.history = SqlAssignmentHistory(engine)
        self.operations = SqlFleetOperations(engine, self.failover)

    # -- WorkerStore: what a worker process does ------------------------------------------

    def register_worker(self, registration: fleet.Registration) -> None:
        """See ``SqlWorkerRegistry.register_worker``."""
        self.registry.register_worker(registration)

    def heartbeat_worker(self, worker_id: str, pulse: fleet.Pulse) -> fleet.HeartbeatReply | None:
        """See ``SqlWorkerRegistry.heartbeat_worker``."""
        return self.registry.heartbeat_worker(worker_id, pulse)

    def read_stop_request(self, worker_id: str) -> fleet.StopMode | None:
        """See ``SqlWorkerRegistry.read_stop_request``."""
        return self.registry.read_stop_request(worker_id)

    def deregister_worker(self, worker_id: str) -> bool:
        """See ``SqlWorkerRegistry.deregister_worker``."""
        return self.registry.deregister_worker(worker_id)

    def record_health_check(self, check: fleet.HealthCheck) -> None:
        """See ``SqlWorkerRegistry.record_health_check``."""
        self.registry.record_health_check(check)

    def count_ready_jobs(self, queues: Sequence[str]) -> int:
        """See ``SqlWorkerRegistry.count_ready_jobs``."""
        return self.registry.count_ready_jobs(queues)

    def record_assignments(self, events: Sequence[fleet.AssignmentEvent]) -> None:
        """See ``SqlAssignmentHistory.record_assignments``."""
        self.history.record_assignments(events)

    def fail_over_workers(
        self, *, ttl_seconds: float, detected_by: str, force: bool = False
    ) -> list[fleet.FailoverEvent]:
        """See ``SqlFailover.fail_over_workers``."""
        return self.failover.fail_over_workers(
            ttl_seconds=ttl_seconds, detected_by=detected_by, force=force
        )

    def fail_over_process(
        self, *, hostname: str, pid: int, detected_by: str
    ) -> list[fleet.FailoverEvent]:
        """See ``SqlFailover.fail_over_process``."""
        return self.failover.fail_over_process(hostname=hostname, pid=pid, detected_by=detected_by)

    def defer_unknown_task(
        self, claim: Claim, *, policy: unknown_tasks.UnknownTaskPolicy
    ) -> unknown_tasks.Verdict | None:
        """See ``SqlUnknownTaskMoves.defer_unknown_task``."""
        return self.unknown_tasks.defer_unknown_task(claim, policy=policy)

    # -- what operators do ------------------------------------------------------------------

    def list_workers(self, *, include_inactive: bool = False) -> list[fleet.WorkerRecord]:
        """See ``SqlFleetOperations.list_workers``."""
        return self.operations.list_workers(include_inactive=include_inactive)

    def get_worker(self, worker_id: str) -> fleet.WorkerRecord | None:
        """See ``SqlFleetOperations.get_worker``."""
        return self.operations.get_worker(worker_id)

    def latest_health_checks(self, worker_ids: Sequence[str]) -> dict[str, fleet.HealthRecord]:
        """See ``SqlFleetOperations.latest_health_checks``."""
        return self.operations.latest_health_checks(worker_ids)

    def request_stop(self, *, worker_id: str | None, mode: fleet.StopMode) -> int:
        """See ``SqlFleetOperations.request_stop``."""
        return self.operations.request_stop(worker_id=worker_id, mode=mode)

    def remove_worker(self, worker_id: str, *, detected_by: str) -> fleet.FailoverEvent | None:
        """See ``SqlFleetOperations.remove_worker``."""
        return self.operations.remove_worker(worker_id, detected_by=detected_by)

    def remove_crashed_workers(self, *, ttl_seconds: float, detected_by: str) -> int:
        """See ``SqlFleetOperations.remove_crashed_workers``."""
        return self.operations.remove_crashed_workers(
            ttl_seconds=ttl_seconds, detected_by=detected_by
        )

    def delete_health_checks(self, *, older_than_days: float) -> int:
        """See ``SqlFleetOperations.delete_health_checks``."""
        return self.operations.delete_health_checks(older_than_days=older_than_days)

    def delete_failover_events(self, *, older_than_days: float) -> int:
        """See ``SqlFleetOperations.delete_failover_events``."""
        return self.operations.delete_failover_events(older_than_days=older_than_days)

    def count_failover_events(self) -> int:
        """See ``SqlFleetOperations.count_failover_events``."""
        return self.operations.count_failover_events()

    def list_failover_events(
        self, *, limit: int = 50, worker_id: str | None = None
    ) -> list[dict[str, Any]]:
        """See ``SqlFleetOperations.list_failover_events``."""
        return self.operations.list_failover_events(limit=limit, worker_id=worker_id)

    def probe_database(self) -> dict[str, Any]:
        """See ``SqlFleetOperations.probe_database``."""
        return self.operations.probe_database()

    def close_orphaned_assignments(self) -> tuple[int, int]:
        """See ``SqlAssignmentHistory.close_orphaned_assignments``."""
        return self.history.close_orphaned_assignments()

    def list_assignments(self, *, job_id: int | None = None) -> list[dict[str, Any]]:
        """See ``SqlAssignmentHistory.list_assignments``."""
        return self.history.list_assignments(job_id=job_id)

    def outcome_counts(self) -> dict[str, dict[str, int]]:
        """See ``SqlAssignmentHistory.outcome_counts``."""
        return self.history.outcome_counts()
