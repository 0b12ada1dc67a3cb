"""LeaseGuard: whether this worker may still trust its leases, by its own monotonic clock.

A worker that was frozen (SIGSTOP, a VM pause) or cut off past its TTL has been failed over:
the jobs it holds run elsewhere. When it resumes, nothing in the process knows that until its
next heartbeat is answered, and a slot that takes a prefetched job in that moment would run
its body a second time. So before a job starts, the guard compares the time since the job's
lease and the worker's registration were last renewed with the TTL less a margin. The times
are those at which the renewing claim or heartbeat was *sent*, so this clock errs on the safe
side of the database's. Past that age, the guard renews the worker's registration and the
job's lease in the ledger first (fenced), and the job starts only if both apply; a job the
ledger refuses is marked lost and never started. The check costs a clock read per job; the
round trips happen only after a pause.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore
from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.lease")


class LeaseGuard:
    """Decides whether a held job may start (see the module).

    ``renew_worker`` (None without fleet membership) heartbeats the worker's registration
    now; a successful renewal reaches the guard through ``worker_confirmed``.
    """

    def __init__(
        self,
        store: JobStore,
        *,
        lease_seconds: float,
        heartbeat_interval_seconds: float,
        renew_worker: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._lease = lease_seconds
        margin = max(heartbeat_interval_seconds, lease_seconds / 5)
        self.trust_seconds = max(lease_seconds - margin, lease_seconds / 2)
        """A lease renewed longer ago than this is checked in the ledger before a start."""
        self._renew_worker = renew_worker
        self._worker_confirmed = time.monotonic() if renew_worker is not None else math.inf
        self._lock = threading.Lock()

    def worker_confirmed(self, sent_at: float) -> None:
        """Record that a registration or heartbeat of this worker sent at ``sent_at`` applied."""
        if self._renew_worker is not None:
            self._worker_confirmed = max(self._worker_confirmed, sent_at)

    def trusted(self, ctx: JobContext) -> bool:
        """Whether ``ctx``'s lease and this worker's registration were renewed recently."""
        age = time.monotonic() - min(ctx.confirmed_at, self._worker_confirmed)
        return age < self.trust_seconds

    def may_start(self, ctx: JobContext) -> bool:
        """Whether ``ctx``'s job may start now: at once while its lease is trusted, else after
        the ledger renewed the worker and the job. False (the job is then not started) when
        the ledger refuses the job (marked lost) or cannot be reached."""
        if self.trusted(ctx):
            return True
        with self._lock:  # slot threads resuming together check the worker once
            if self.trusted(ctx):
                return True
            age = time.monotonic() - min(ctx.confirmed_at, self._worker_confirmed)
            log.warning(
                "lease may have lapsed (was this process paused or cut off?);"
                " checking the ledger before starting the job",
                job_id=ctx.job_id,
                attempt=ctx.attempt,
                lease_age_s=round(age, 1),
            )
            return self._renew(ctx)

    def _renew(self, ctx: JobContext) -> bool:
        try:
            if time.monotonic() - self._worker_confirmed >= self.trust_seconds:
                assert self._renew_worker is not None  # else the age would be infinite
                self._renew_worker()
                if time.monotonic() - self._worker_confirmed >= self.trust_seconds:
                    log.warning("worker registration not renewed; not starting the job")
                    return False
            sent = time.monotonic()
            [applied] = self._store.heartbeat_jobs([ctx.claim], lease_seconds=self._lease)
        except errors.StoreError as exc:
            # Dropped, not started: its lease runs out and the fleet puts it back.
            log.warning("cannot check the job's lease; not starting it", error=str(exc))
            return False
        if applied:
            ctx.confirm(sent)
            return True
        ctx.mark_lost()
        log.warning(
            "job no longer owned by this worker; not starting it",
            job_id=ctx.job_id,
            attempt=ctx.attempt,
        )
        return False
