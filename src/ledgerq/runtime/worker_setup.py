"""What a worker is made of: its options (``WorkerOptions``, from settings) and its
collaborators (``WorkerDeps``, wired by the composition root)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledgerq.core.codec import PayloadCodec
from ledgerq.core.operations import EventSink
from ledgerq.core.ports import (
    ControlChannel,
    JobStore,
    LedgerRepair,
    Transport,
    WorkerStore,
    WorkflowStore,
)
from ledgerq.core.spool import Spool
from ledgerq.core.tasks import TaskRegistry
from ledgerq.runtime.job_hooks import JobHooks
from ledgerq.runtime.middleware import JobMiddleware
from ledgerq.runtime.reconciler import ReconcilePolicy


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How one worker process runs. Times are in seconds."""

    queues: tuple[str, ...] = ("default",)
    concurrency: int = 8
    prefetch: int | None = 0
    """Jobs held beyond the running slots; None follows the job durations (PrefetchRoom)."""
    batch_size: int = 32
    poll_interval_seconds: float = 1.0
    heartbeat_interval_seconds: float = 5.0
    lease_seconds: float = 15.0
    shutdown_grace_seconds: float = 30.0
    burst: bool = False
    max_jobs: int | None = None
    reconcile: ReconcilePolicy | None = None
    """Run the reconciler inside this worker (one instance at a time fleet-wide); None: not."""
    health_check_interval_seconds: float = 30.0
    failover_check_interval_seconds: float = 5.0
    recycle_when_hung: bool = False
    """Stop at once (``recycle_requested``) when a timed-out job's thread cannot be stopped,
    so the caller ends or replaces the process; False: abandon the thread and go on (an
    embedding process keeps its worker, but the blocked code may still finish)."""
    unknown_task_grace_seconds: float = 300.0
    """With a fleet store: how long a job of a task no live worker declares may wait (from
    its first put-back) before it is buried; see ``runtime/deferrer.py``."""


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """What a worker works with (the composition root wires it).

    ``events`` (optional) receives the worker's operational events (metrics). With
    ``fleet_store`` the worker registers, heartbeats, records health checks and its assignment
    history, obeys stop requests (read when ``control`` wakes it) and fails over dead workers.
    ``repair`` runs the reconciler when the options ask for it. ``middleware`` wraps each
    job's execution, in the order ``runtime/middleware.py`` documents (gate, items, metrics).
    """

    store: JobStore
    transport: Transport
    registry: TaskRegistry
    codec: PayloadCodec
    middleware: Sequence[JobMiddleware] = ()
    events: EventSink | None = None
    repair: LedgerRepair | None = None
    fleet_store: WorkerStore | None = None
    control: ControlChannel | None = None
    workflows: WorkflowStore | None = None
    job_hooks: Sequence[JobHooks] = ()
    """The application's lifecycle hooks (``app.add_hooks``), called around each job."""
    spool: Spool | None = None
    """The enqueue spool (``LEDGERQ_SPOOL``) whose entries the worker's drainer replays."""
