"""LeaseGuard: whether this worker may still trust its leases, by its own monotonic clock.

A worker that was frozen (SIGSTOP, a VM pause) or cut off past its TTL has been failed over:
the jobs it holds run elsewhere. When it resumes (or its link heals), nothing in the process
knows that until its next heartbeat is answered, and a slot that takes a prefetched job in
that moment would run its body a second time. A partitioned worker cannot even tell a cut
link from a quiet one. So before a job starts, the guard asks two things, by the send times
of the claims and heartbeats that renewed them (this clock errs on the safe side of the
database's):

- was the worker's registration renewed within the TTL less a margin? Else it is renewed
  first (a refusal makes the worker abandon what it lost);
- was the job's own lease renewed within the start window (half a heartbeat interval, at
  most 1 s)? A job that starts soon after its claim is; one that waited in the prefetch is
  confirmed with one fenced heartbeat of its own, and starts only if it applies.

A job the ledger refuses is marked lost and never started; one that cannot be checked (the
database is unreachable) is dropped, its lease runs out and the fleet puts it back. So only
bodies that had started, or whose lease was confirmed within the start window, when the
worker was cut off can run twice. The common case costs a clock read per job; the round
trip is paid only by jobs that waited in a prefetch longer than the window.
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


#: A job that waited longer than this (at most half a heartbeat interval) since its lease was
#: last renewed is confirmed in the ledger before it starts.
START_WINDOW_SECONDS = 1.0


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
        """A registration renewed longer ago than this is renewed before a start."""
        self.start_window = min(START_WINDOW_SECONDS, heartbeat_interval_seconds / 2)
        """A job whose lease was renewed longer ago than this is confirmed before it starts."""
        self._renew_worker = renew_worker
        self._worker_confirmed = time.monotonic() if renew_worker is not None else math.inf
        self._lock = threading.Lock()

    def worker_confirmed(self, sent_at: float) -> None:
        """Record that a registration or heartbeat of this worker sent at ``sent_at`` applied."""
        if self._renew_worker is not None:
            self._worker_confirmed = max(self._worker_confirmed, sent_at)

    def trusted(self, ctx: JobContext) -> bool:
        """Whether ``ctx``'s lease was renewed within the start window (its claim, mostly)
        and this worker's registration within the trust period."""
        now = time.monotonic()
        return (
            now - ctx.confirmed_at < self.start_window
            and now - self._worker_confirmed < self.trust_seconds
        )

    def may_start(self, ctx: JobContext) -> bool:
        """Whether ``ctx``'s job may start now: at once while trusted, else after the ledger
        renewed the worker (if its registration is old) and the job. False (the job is then
        not started) when the ledger refuses the job (marked lost) or cannot be reached.

        A job that waited in the prefetch (behind a longer one) is confirmed with one fenced
        round trip, so a worker that was cut off meanwhile (a partition it cannot tell from a
        quiet link) starts nothing it may have lost: the check does not get through, or is
        refused after the heal."""
        if self.trusted(ctx):
            return True
        try:
            if not self._worker_fresh():
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

    def _worker_fresh(self) -> bool:
        """Whether the registration was renewed within the trust period, renewing it first if
        not (slot threads resuming together renew it once)."""
        if time.monotonic() - self._worker_confirmed < self.trust_seconds:
            return True
        with self._lock:
            age = time.monotonic() - self._worker_confirmed
            if age < self.trust_seconds:
                return True
            log.warning(
                "registration may have lapsed (was this process paused or cut off?);"
                " renewing it before starting a job",
                registration_age_s=round(age, 1),
            )
            assert self._renew_worker is not None  # else the age would be infinite
            self._renew_worker()
            if time.monotonic() - self._worker_confirmed < self.trust_seconds:
                return True
        log.warning("worker registration not renewed; not starting the job")
        return False
