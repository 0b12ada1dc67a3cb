"""The ports: what the runtime and client need from the outside, as Protocols.

Every state-changing call on a running job takes its ``Claim`` (id + attempt) and reports,
per job, whether the write applied, so a worker that lost its job cannot overwrite the new
owner's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ledgerq.core import fleet
from ledgerq.core.job import Claim, EnqueueResult, Job, NewJob
from ledgerq.core.states import JobState


@dataclass(frozen=True, slots=True)
class Completion:
    """The end of one attempt, written in groups by ``JobStore.complete_jobs``.

    ``state`` is ``succeeded``, ``failed`` (retried after ``retry_delay_seconds``), ``dead``
    or ``cancelled``.
    """

    claim: Claim
    state: JobState
    result_json: str | None = None
    error_json: str | None = None
    retry_delay_seconds: float = 0.0


class JobStore(Protocol):
    """The SQL ledger of jobs."""

    def insert_jobs(
        self, jobs: Sequence[NewJob], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """Insert jobs in one bulk statement, in the caller's connection if one is given."""

    def claim_jobs(
        self, *, queues: Sequence[str], worker_id: str, limit: int, lease_seconds: float
    ) -> list[Job]:
        """Atomically move up to ``limit`` due ``queued`` jobs to ``running`` for ``worker_id``,
        by priority then age, incrementing each one's attempt."""

    def stage_due_jobs(self, *, limit: int = 1000) -> int:
        """Move ``scheduled`` and ``failed`` jobs whose run_at has come to ``queued``."""

    def seconds_until_retry(self, *, queues: Sequence[str]) -> float | None:
        """Seconds (by the database clock) until the earliest ``failed`` job of these queues
        is due again; None if none waits for a retry."""

    def complete_jobs(self, completions: Sequence[Completion]) -> list[bool]:
        """Write a group of attempt outcomes in one transaction; fenced, one bool per item."""

    def heartbeat_jobs(self, claims: Sequence[Claim], *, lease_seconds: float) -> list[bool]:
        """Extend the lease of running attempts; fenced, one bool per claim."""

    def requeue_jobs(self, claims: Sequence[Claim]) -> list[bool]:
        """Put running attempts back to ``queued`` (graceful shutdown); fenced."""

    def maintain_tables(self) -> bool:
        """Clean up after churn where the database would not; True if anything ran."""

    def get_job(self, job_id: int) -> Job:
        """Return the job or raise ``JobNotFound``."""

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Return the newest jobs matching every given filter."""

    def cancel_job(self, job_id: int) -> Job:
        """Cancel a job that has not finished; raise ``InvalidTransition`` otherwise."""

    def retry_job(self, job_id: int) -> Job:
        """Queue a failed, dead or cancelled job again now."""

    def count_jobs(self) -> dict[tuple[str, JobState], int]:
        """Number of jobs per (queue, state)."""


class Waker(Protocol):
    """Something that tells an idle fetcher early that new jobs may be there."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if woken by a signal of new work."""

    def close(self) -> None:
        """Release the underlying connection."""


class Transport(Protocol):
    """Carries hints that jobs exist. Correctness never depends on it: the claim decides."""

    def push(self, *, queue: str, job_ids: Sequence[int]) -> None:
        """Announce freshly committed jobs."""

    def pull(self, *, queues: Sequence[str], timeout: float) -> list[int]:
        """Wait up to ``timeout`` for a hint; return job ids to try (empty: claim by query)."""

    def interrupt(self) -> None:
        """Wake a blocked ``pull`` at once (used at shutdown and when capacity frees)."""

    def close(self) -> None:
        """Release connections."""


class WorkerStore(Protocol):
    """The fleet's registry as a worker process needs it. Writes of a worker that the fleet
    declared dead are refused, like fenced job writes."""

    def register_worker(self, registration: fleet.Registration) -> None:
        """Record the worker as ``active`` with fresh start and heartbeat times (database
        clock); a worker re-registering after a failover is made active again."""

    def heartbeat_worker(self, worker_id: str, pulse: fleet.Pulse) -> fleet.HeartbeatReply | None:
        """Renew the worker's heartbeat; None if refused (the worker is dead or unknown)."""

    def deregister_worker(self, worker_id: str) -> bool:
        """Mark a cleanly exiting worker ``stopped``; False if it was not active."""

    def record_health_check(self, check: fleet.HealthCheck) -> None:
        """Store one health record, stamped with the database clock."""

    def record_assignments(self, events: Sequence[fleet.AssignmentEvent]) -> None:
        """Store starts and ends of attempts; the first recorded end of an attempt wins."""

    def fail_over_workers(
        self, *, ttl_seconds: float, detected_by: str, force: bool = False
    ) -> list[fleet.FailoverEvent]:
        """Declare dead every active worker whose heartbeat is older than ``ttl_seconds`` and
        move its running jobs back to ``queued`` (``dead`` when attempts are exhausted) with
        fenced writes, recording one event per worker. Also rescues running jobs of
        workers that are not active: those whose lease expired, or all of them if ``force``.
        Concurrent callers never fail over the same worker twice."""

    def count_ready_jobs(self, queues: Sequence[str]) -> int:
        """Due ``queued`` jobs of these queues, up to a small cap (a stall probe)."""
