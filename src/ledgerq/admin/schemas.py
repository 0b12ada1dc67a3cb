"""Request and response bodies of the HTTP API (they are its OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ledgerq.core.job import MAX_DELAY_SECONDS

QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
#: Keys travel into SQL strings: printable text only (PostgreSQL refuses NUL in text).
KEY_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class EnqueueRequest(BaseModel):
    """One job to create. ``args``/``kwargs`` are the task's JSON arguments."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=200, description="Registered task name.")
    args: list[Any] = Field(default_factory=list, description="Positional arguments.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments.")
    queue: str | None = Field(default=None, pattern=QUEUE_PATTERN, description="Default: task's.")
    priority: int | None = Field(default=None, ge=-32767, le=32767, description="Lower first.")
    delay: float = Field(default=0.0, ge=0, le=MAX_DELAY_SECONDS, description="Seconds.")
    run_at: datetime | None = Field(default=None, description="Aware time; instead of delay.")
    dedupe_key: str | None = Field(default=None, min_length=1, max_length=255, pattern=KEY_PATTERN)
    dedupe_for: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DELAY_SECONDS,
        description="Seconds the dedupe_key stays taken after this enqueue, even once the job"
        " finished (needs dedupe_key).",
    )
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400, description="Seconds.")
    held: bool = Field(
        default=False, description="Stored as held: it waits for POST /api/v1/jobs/{id}/start."
    )
    expires_at: datetime | None = Field(
        default=None,
        description="Aware time to start by: a job still waiting then is deleted, never run.",
    )


class JobError(BaseModel):
    """What the last failed attempt recorded."""

    model_config = ConfigDict(extra="allow")

    kind: str | None = None
    message: str | None = None
    type: str | None = None
    traceback: str | None = None
    attempt: int | None = None


class ItemsOut(BaseModel):
    """How far a batch job's items are (see ``ctx.items()``)."""

    total: int | None
    done: int
    done_this_attempt: int
    rate_per_second: float | None
    eta_seconds: float | None
    last_item_at: datetime | None


class JobOut(BaseModel):  # type: ignore[no-redef]  # pydantic plugin: a field named kwargs
    """A job as the ledger records it; arguments with secret-looking names are masked."""

    id: int
    queue: str
    task: str
    state: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    attempt: int = Field(description="The job's runs so far (claims postponed by a limit aside).")
    max_attempts: int = Field(description="The runs the job may have.")
    postponed: int = Field(
        0, description="Claims that ran nothing: postponed by a limit, or put back unstarted."
    )
    run_at: datetime
    created_at: datetime
    claimed_at: datetime | None = Field(None, description="When the current attempt was claimed.")
    started_at: datetime | None = Field(
        description="When the current attempt's body started (null while it waits to start)."
    )
    waiting_to_start: bool = Field(
        False, description="Claimed (state running) but held in a worker's prefetch."
    )
    heartbeat_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    dedupe_key: str | None
    timeout_seconds: float | None
    expires_at: datetime | None = Field(None, description="Deleted unstarted after this time.")
    producer: str | None = Field(
        None, description="The producer token's name that enqueued it (null: not a producer)."
    )
    result: Any = None
    error: JobError | None = None
    items: ItemsOut | None = Field(default=None, description="Progress of the batch items.")
    batch_id: int | None = Field(default=None, description="The batch the job belongs to.")
    workflow_id: str | None = Field(default=None, description="The workflow it is a step of.")


class EnqueueResponse(BaseModel):
    """The job an enqueue produced or found."""

    id: int
    duplicate: bool = Field(
        description="A job held the dedupe key already (unfinished, or within its dedupe_for"
        " window); id is that job's."
    )
    replayed: bool = Field(description="The Idempotency-Key was seen before.")
    job: JobOut | None = Field(
        description="The job; null when a producer's dedupe_key found another caller's job."
    )


class JobList(BaseModel):
    """Newest jobs first."""

    jobs: list[JobOut]


class LifetimeFigures(BaseModel):
    """Jobs since the beginning (rows the retention deleted included)."""

    enqueued: int = Field(description="Every job ever accepted.")
    succeeded: int
    dead: int = Field(description="Jobs whose attempts were spent.")
    cancelled: int
    expired: int = Field(description="Jobs deleted unstarted past their expires_at.")


class QueueLifetime(LifetimeFigures):
    """A queue's lifetime figures, summed and per task."""

    tasks: dict[str, LifetimeFigures]


class QueueStats(BaseModel):
    """One queue: jobs per state, paused flag and latency, and its lifetime figures."""

    name: str
    counts: dict[str, int]
    queued: int
    running: int = Field(description="Jobs whose body runs now.")
    claimed: int = Field(
        0, description="Jobs a worker claimed and holds in its prefetch, not started yet."
    )
    paused: bool
    latency_seconds: float = Field(description="Age of the oldest due queued job.")
    lifetime: QueueLifetime | None = Field(
        None, description="Jobs since the beginning; they survive retention."
    )


class StatsOut(BaseModel):
    """Every queue's statistics and totals per state, and lifetime figures of all queues."""

    queues: list[QueueStats]
    totals: dict[str, int]
    lifetime: LifetimeFigures | None = Field(
        None, description="Jobs since the beginning over every queue; they survive retention."
    )


class WorkerOut(BaseModel):
    """One worker."""

    worker_id: str
    status: str
    running_jobs: int
    queues: list[str]
    last_heartbeat_at: datetime | None
    heartbeat_age_seconds: float | None
    hostname: str = ""
    stopped_at: datetime | None = Field(
        default=None, description="When a stopped or dead worker left (null while active)."
    )


class WorkersOut(BaseModel):
    """The workers and where the list comes from (``jobs``: derived from running jobs)."""

    source: str
    workers: list[WorkerOut]


class MetricsOut(BaseModel):
    """A JSON snapshot for the dashboard's charts and for scripts."""

    at: float = Field(description="Unix time of the snapshot.")
    totals: dict[str, int]
    finished_total: int = Field(description="Jobs succeeded, dead or cancelled.")
    queue_lengths: dict[str, int]
    workers_active: int


class MinuteOut(BaseModel):
    """Jobs that finished within one minute, per final state."""

    minute_at: datetime = Field(description="The minute's start (UTC, database clock).")
    succeeded: int
    dead: int
    cancelled: int


class HistoryOut(BaseModel):
    """Finished jobs per minute, oldest first; the last minute is the current one so far."""

    minutes: list[MinuteOut]


class QueueControlOut(BaseModel):
    """A queue's pause state after a pause or resume."""

    queue: str
    paused: bool


class Problem(BaseModel):
    """An error: what went wrong, in one line."""

    detail: str


class Check(BaseModel):
    """One readiness check."""

    ok: bool
    detail: str = ""


class HealthOut(BaseModel):
    """``ok`` when every check passes."""

    status: str
    checks: dict[str, Check] = Field(default_factory=dict)
