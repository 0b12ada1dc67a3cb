"""AdminDeps: everything the HTTP layer needs, handed in by the CLI's composition (ports and
the Client only, so this package never touches SQL, Redis or Prometheus)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledgerq.admin.timed_cache import TimedCache
from ledgerq.core.items import JobItemStore
from ledgerq.core.job import Job
from ledgerq.core.lifetime import LifetimeTotal
from ledgerq.core.locks import LockAdmin
from ledgerq.core.operations import (
    FailoverLog,
    FleetView,
    HealthProbe,
    IdempotencyStore,
    QueueControl,
)
from ledgerq.core.ports import LimitStore
from ledgerq.core.producers import RequestLedger, producer_of
from ledgerq.core.redaction import mask_value
from ledgerq.core.schedules import ScheduleAdmin
from ledgerq.producer.batch_builder import BatchClient
from ledgerq.producer.client import Client
from ledgerq.producer.workflow_api import Workflows

#: Seconds the API and dashboard reuse the lifetime figures: they count every job row, and
#: the dashboard asks for them every two seconds.
LIFETIME_TTL_SECONDS = 10.0


@dataclass(frozen=True)
class AdminReads:
    """Where the dashboard, the list endpoints and the stats read: the read replica
    (``DATABASE_READ_URL``) when one is configured, else the ledger itself. Reads of a
    replica may lag; nothing here claims or writes."""

    client: Client
    """Lists and counts jobs (``list``, ``store.count_*``); never enqueues."""
    controls: QueueControl
    """Paused flags, latency and finished-per-minute history; never pauses."""
    fleet: FleetView


@dataclass
class AdminDeps:
    """The admin surface's collaborators."""

    client: Client
    controls: QueueControl
    idempotency: IdempotencyStore
    fleet: FleetView
    probes: Sequence[HealthProbe]
    render_metrics: Callable[[], tuple[bytes, str]]
    schedules: ScheduleAdmin
    """The same schedule operations as ``ledgerq schedule``."""
    batches: BatchClient
    """The application's batches (``app.batches``), as ``ledgerq batch`` uses them."""
    workflows: Workflows
    """The application's workflows (``app.workflows``), as ``ledgerq workflow`` uses them."""
    locks: LockAdmin | None = None
    limits: LimitStore | None = None
    """Circuit breakers (``GET /admin/queue/breakers``); None: none are listed."""
    items: JobItemStore | None = None
    """Progress of batch items, shown with a job (optional)."""
    requests: RequestLedger | None = None
    """Idempotency-Key records of bulk enqueues (None: bulk refuses Idempotency-Key)."""
    failovers: FailoverLog | None = None
    """The failover record (``GET /admin/failover-events``); None: not listed."""
    replica: AdminReads | None = None
    """Reads on the read replica; None: ``reads`` reads the ledger itself."""
    lifetime_ttl_seconds: float = LIFETIME_TTL_SECONDS
    """How old the lifetime figures shown may be (their read counts every job row)."""
    lifetime: TimedCache[list[LifetimeTotal]] = field(init=False)
    """The lifetime figures per queue and task (``lifetime.get()``), read at most once per
    ``lifetime_ttl_seconds``."""
    reads: AdminReads = field(init=False)
    """Where listings, counts and the dashboard read (``replica`` or the ledger). A job read
    by id, and every write, go to the ledger: a client polling the job it just enqueued must
    see it."""

    def __post_init__(self) -> None:
        self.reads = self.replica or AdminReads(self.client, self.controls, self.fleet)
        self.lifetime = TimedCache(
            self.reads.client.store.count_lifetime, self.lifetime_ttl_seconds
        )


def mask_secrets(value: Any) -> Any:
    """A copy of ``value`` with the values of secret-looking keys replaced by ``***`` and
    passwords inside strings masked (the logs' rule: ``ledgerq.core.redaction``)."""
    return mask_value(value)


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def job_document(job: Job) -> dict[str, Any]:
    """A job as the API and dashboard show it: arguments, result and error (message and
    traceback) with secrets masked. Errors are masked when recorded too; this covers rows
    recorded before that, and texts the recording rule could not know."""
    payload = _loads(job.args_json)
    payload = payload if isinstance(payload, dict) else {}
    error = _loads(job.error_json)
    return {
        "id": job.id,
        "queue": job.queue,
        "task": job.task,
        "state": job.state.value,
        "args": mask_secrets(list(payload.get("args", []))),
        "kwargs": mask_secrets(dict(payload.get("kwargs", {}))),
        "priority": job.priority,
        # Runs, not claims: a claim a limit postponed without running is not an attempt.
        "attempt": job.runs,
        "max_attempts": job.max_runs,
        "postponed": job.postponed,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "claimed_at": job.claimed_at,
        "started_at": job.started_at,
        "waiting_to_start": job.waiting_to_start,
        "heartbeat_at": job.heartbeat_at,
        "finished_at": job.finished_at,
        "worker_id": job.worker_id,
        "dedupe_key": job.dedupe_key,
        "timeout_seconds": job.timeout_seconds,
        "expires_at": job.expires_at,
        "producer": producer_of(job.args_json),
        "result": mask_secrets(_loads(job.result_json)),
        "error": mask_secrets(error) if isinstance(error, dict) else None,
        "batch_id": job.batch_id,
        "workflow_id": job.workflow_id,
    }
