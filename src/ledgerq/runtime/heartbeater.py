"""Heartbeater: extends the leases of this worker's running jobs from its own thread, so a
busy or blocked job cannot starve it; a refused (fenced) heartbeat marks the job lost."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from ledgerq.core.ports import JobStore
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.heartbeater")


class Heartbeater(PeriodicService):
    """Every ``interval_seconds``, renews the lease of each job ``running_jobs()`` returns."""

    thread_name = "ledgerq-heartbeat"
    logger = log
    failure_message = "heartbeat failed"

    def __init__(
        self,
        store: JobStore,
        running_jobs: Callable[[], list[JobContext]],
        *,
        interval_seconds: float,
        lease_seconds: float,
    ) -> None:
        super().__init__(interval_seconds)
        self._store = store
        self._running_jobs = running_jobs
        self._lease = lease_seconds

    def tick(self) -> None:
        """One beat."""
        self.beat()

    def beat(self) -> int:
        """Renew every running job's lease once; return how many were refused."""
        contexts = self._running_jobs()
        if not contexts:
            return 0
        sent = time.monotonic()
        applied = self._store.heartbeat_jobs([c.claim for c in contexts], lease_seconds=self._lease)
        refused = 0
        # A job that completed while the heartbeat was in flight is refused too; only a job
        # this worker still holds has really been lost.
        still_held = {id(c) for c in self._running_jobs()}
        for ctx, ok in zip(contexts, applied, strict=True):
            if ok:
                ctx.confirm(sent)
            elif not ctx.completing and id(ctx) in still_held:
                refused += 1
                ctx.mark_lost()
                log.warning(
                    "job no longer owned by this worker", job_id=ctx.job_id, attempt=ctx.attempt
                )
        return refused
