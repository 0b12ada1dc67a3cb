"""The fleet as the ledger records it: worker registrations, heartbeats, health checks, the
history of which worker held which attempt, and failover events. Plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class WorkerState(StrEnum):
    """A registered worker's life: ``active`` until a clean exit (``stopped``) or until the
    fleet fails it over (``dead``)."""

    ACTIVE = "active"
    STOPPED = "stopped"
    DEAD = "dead"


class StopMode(StrEnum):
    """How an operator asked a worker to stop: ``graceful`` lets in-flight jobs finish within
    the grace period; ``immediate`` puts them back at once."""

    GRACEFUL = "graceful"
    IMMEDIATE = "immediate"


class Outcome(StrEnum):
    """How one attempt held by one worker ended (``job_assignments.outcome``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"  # put back by a graceful stop
    LOST = "lost"  # the worker's fenced write was refused: someone else owns the job now
    FAILED_OVER = "failed_over"  # the worker was declared dead and the job moved on
    ORPHANED = "orphaned"  # the attempt no longer runs anywhere (cleanup, stuck-job reset)


@dataclass(frozen=True, slots=True)
class Registration:
    """What a worker process tells the fleet about itself when it starts."""

    worker_id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    version: str
    tasks: tuple[str, ...] = ()
    """The task names its application registers: the fleet's answer to "does any live worker
    know this task" for a job a worker without it claimed."""


@dataclass(frozen=True, slots=True)
class Pulse:
    """What a worker reports with each heartbeat."""

    jobs_in_flight: int
    jobs_processed: int
    last_fetch_age_seconds: float | None
    jobs_per_second: float = 0.0


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """The fleet's answer to a heartbeat that applied: a pending stop request, if any, and
    the mean ``jobs_per_second`` per execution slot (rate / concurrency) of the active workers
    on the same queues (None if alone), so a worker with twice the slots gets twice the share."""

    stop_requested: StopMode | None
    peers_jobs_per_second_per_slot: float | None = None


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """One health record of one worker. ``problems`` is empty when healthy."""

    worker_id: str
    db_latency_ms: float | None
    transport_latency_ms: float | None
    memory_mb: float | None
    cpu_percent: float | None
    jobs_in_flight: int
    last_fetch_age_seconds: float | None
    problems: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """Whether nothing is wrong."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class AssignmentEvent:
    """A start (``outcome`` None) or an end of one attempt held by one worker."""

    job_id: int
    attempt: int
    worker_id: str
    started_at: datetime | None = None
    outcome: Outcome | None = None


@dataclass(frozen=True, slots=True)
class FailoverEvent:
    """One worker failed over: which jobs went back to ``queued`` and which became ``dead``
    (attempts exhausted), who noticed, and how long the move took."""

    worker_id: str
    detected_by: str
    last_heartbeat_at: datetime | None
    requeued: tuple[int, ...]
    dead: tuple[int, ...]
    duration_ms: float


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A row of the registry as operators see it. Ages are in seconds by the database clock."""

    worker_id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    version: str
    state: WorkerState
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    stopped_at: datetime | None
    stop_requested: StopMode | None
    jobs_in_flight: int
    jobs_processed: int
    last_fetch_age_seconds: float | None


@dataclass(frozen=True, slots=True)
class HealthRecord:
    """A stored health check with its time and age (seconds, database clock)."""

    check: HealthCheck
    checked_at: datetime
    age_seconds: float
