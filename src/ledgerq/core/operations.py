"""Ports of the operations surface (admin API, dashboard, metrics): queue controls, the fleet
view, health probes and runtime events. Protocols and plain data only; adapters implement them
and ``bootstrap`` wires them, so the HTTP layer never sees SQL, Redis or Prometheus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    """A recorded ``Idempotency-Key``: the job it produced and a hash of the request body,
    so a key reused with a different request is told apart from a plain retry."""

    key: str
    job_id: int
    request_hash: str


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """The jobs that finished within one minute (by their ``finished_at``, database clock),
    per final state: the dashboard's throughput and failure history."""

    minute_at: datetime
    """The minute's start, aware UTC."""
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0


#: The longest history ``finished_per_minute`` gives (a day).
MAX_HISTORY_MINUTES = 1440


class QueueControl(Protocol):
    """Pausing queues (a paused queue keeps accepting jobs; workers stop claiming from it)."""

    def pause_queue(self, queue: str) -> None:
        """Stop claims from ``queue``; pausing a paused queue is a no-op."""

    def resume_queue(self, queue: str) -> None:
        """Let workers claim from ``queue`` again; resuming a running queue is a no-op."""

    def paused_queues(self) -> set[str]:
        """Names of the paused queues."""

    def queue_latency_seconds(self) -> dict[str, float]:
        """Per queue, the age in seconds of its oldest due ``queued`` job (database clock)."""

    def finished_per_minute(self, *, minutes: int) -> list[MinuteCounts]:
        """The last ``minutes`` minutes (1 to ``MAX_HISTORY_MINUTES``), oldest first, each
        with the jobs that finished in it; the last one is the current minute, so far.
        Minutes without a finished job are there with zeros. Rows the retention already
        deleted are not counted."""


class IdempotencyStore(Protocol):
    """Remembers which job an ``Idempotency-Key`` produced."""

    def find_request(self, key: str) -> IdempotentRequest | None:
        """The record of ``key``, or None."""

    def remember_request(self, request: IdempotentRequest) -> IdempotentRequest:
        """Store ``request`` unless the key is taken; return the record that holds the key."""


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker as the operations surface shows it."""

    worker_id: str
    running_jobs: int
    last_heartbeat_at: datetime | None
    queues: tuple[str, ...] = ()
    status: str = "running"
    source: str = "jobs"
    """Where the row came from: ``jobs`` (derived from running jobs) or a worker registry."""
    hostname: str = ""
    stopped_at: datetime | None = None
    """When a ``stopped`` or ``dead`` worker left the fleet (None while it is active)."""


class FleetView(Protocol):
    """The workers known to the ledger."""

    def list_workers(self, *, include_inactive: bool = False) -> Sequence[WorkerView]:
        """Every active worker, most recently seen first; with ``include_inactive`` the
        stopped and dead ones the ledger still records follow them (most recent first).
        A view without a worker registry knows active workers only."""


class FailoverLog(Protocol):
    """The record of failovers: which dead worker, the jobs moved, the time taken."""

    def list_failover_events(
        self, *, limit: int = 50, worker_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` events (of ``worker_id`` alone, when given), newest first, as
        plain data: ``id``, ``worker_id``, ``detected_by``, ``last_heartbeat_at``,
        ``detected_at``, ``jobs_requeued``, ``jobs_dead``, ``job_ids`` and ``duration_ms``."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one readiness check."""

    name: str
    ok: bool
    detail: str = ""


class HealthProbe(Protocol):
    """One dependency the process needs to be ready (database, migrations, Redis)."""

    name: str

    def check(self) -> ProbeResult:
        """Check the dependency now; never raise."""


@dataclass(frozen=True, slots=True)
class JobFinished:
    """A worker wrote the outcome of one attempt (``outcome`` is the new job state)."""

    queue: str
    task: str
    outcome: str
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class UnknownTaskSeen:
    """A worker claimed a job of a task its application does not register; ``outcome`` is
    ``deferred`` (put back without spending an attempt) or ``buried`` (no live worker
    declared the task for the grace period)."""

    queue: str
    task: str
    outcome: str


@dataclass(frozen=True, slots=True)
class JobsEnqueued:
    """Jobs were accepted into the ledger."""

    queue: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class ReconcilePassed:
    """A reconciler pass finished; ``actions`` counts what it did (stuck_requeued, staged,
    announced, deleted_succeeded, ...)."""

    actions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class HintsDropped:
    """Transport hints whose claim failed (already taken, finished, unknown, malformed)."""

    count: int


@dataclass(frozen=True, slots=True)
class StoreWriteFailed:
    """A write the worker must make (``operation``: completion, ...) failed and will be
    retried: every failure is one event, so a write that keeps failing keeps counting."""

    operation: str


@dataclass(frozen=True, slots=True)
class CompletionBacklog:
    """Finished attempts whose outcome is not yet written: ``pending`` of them, the oldest
    waiting ``oldest_seconds``. Emitted while a worker holds its claims back for them, and
    once with zeros when it claims again."""

    pending: int
    oldest_seconds: float


@dataclass(frozen=True, slots=True)
class HealthChecked:
    """A worker's registrar ran one health check (the row it writes to
    ``worker_health_checks``): ``ok`` unless it found a problem (database unreachable, not
    consuming while jobs wait) or could not record it."""

    ok: bool


@dataclass(frozen=True, slots=True)
class PoolUse:
    """One process's database connection pool: connections ``checked_out`` now, the pool's
    ``size``, connections open beyond it now (``overflow``) and the most it hands out
    (``most``: size + allowed overflow). All 0 for pools without a limit (SQLite's)."""

    checked_out: int = 0
    size: int = 0
    overflow: int = 0
    most: int = 0


Event = (
    JobFinished
    | HealthChecked
    | JobsEnqueued
    | ReconcilePassed
    | HintsDropped
    | StoreWriteFailed
    | CompletionBacklog
    | UnknownTaskSeen
)
"""Every event a sink may receive."""


class EventSink(Protocol):
    """Receives runtime events (metrics, logs). ``emit`` must be cheap and never raise."""

    def emit(self, event: Event) -> None:
        """Record one event."""
