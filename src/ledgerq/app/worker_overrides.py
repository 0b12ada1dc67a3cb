"""The options ``LedgerQ.worker(...)`` takes: each overrides the setting of the same meaning
for that worker; None (or leaving it out) keeps the setting. Times are in seconds."""

from __future__ import annotations

from typing import TypedDict


class WorkerOverrides(TypedDict, total=False):
    """Keyword options of ``LedgerQ.worker``; see ``runtime.worker.WorkerOptions``."""

    queues: tuple[str, ...] | None
    concurrency: int | None
    prefetch: int | None
    batch_size: int | None
    poll_interval_seconds: float | None
    heartbeat_interval_seconds: float | None
    lease_seconds: float | None
    shutdown_grace_seconds: float | None
    burst: bool | None
    max_jobs: int | None
    reconcile: bool
    """False: this worker runs no reconciler (by default every worker may)."""
    health_check_interval_seconds: float | None
    failover_check_interval_seconds: float | None
    recycle_when_hung: bool | None
    unknown_task_grace_seconds: float | None
