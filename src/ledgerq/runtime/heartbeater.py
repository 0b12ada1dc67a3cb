"""Heartbeater: extends the leases of this worker's running jobs from its own thread, so a
busy or blocked job cannot starve it; a refused (fenced) heartbeat marks the job lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore
from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.heartbeater")


class Heartbeater:
    """Every ``interval_seconds``, renews the lease of each job ``running_jobs()`` returns."""

    def __init__(
        self,
        store: JobStore,
        running_jobs: Callable[[], list[JobContext]],
        *,
        interval_seconds: float,
        lease_seconds: float,
    ) -> None:
        self._store = store
        self._running_jobs = running_jobs
        self._interval = interval_seconds
        self._lease = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerq-heartbeat", daemon=True)

    def start(self) -> None:
        """Start beating."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating."""
        self._stop.set()
        self._thread.join(5)

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

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.beat()
            except errors.StoreError as exc:
                log.warning("heartbeat failed", error=str(exc))
