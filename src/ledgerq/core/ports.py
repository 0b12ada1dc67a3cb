"""The ports: what the runtime and client need from the outside, as Protocols.

Every state-changing call on a running job takes its ``Claim`` (id + attempt) and reports,
per job, whether the write applied, so a worker that lost its job cannot overwrite the new
owner's result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from ledgerq.core import fleet, unknown_tasks
from ledgerq.core.job import Claim, EnqueueResult, Job, JobHint, NewJob
from ledgerq.core.lifetime import LifetimeTotal

# Ports of limits and workflows live beside this module; importable from here as before.
from ledgerq.core.limit_workflow_ports import LimitStore as LimitStore
from ledgerq.core.limit_workflow_ports import RateLimitBackend as RateLimitBackend
from ledgerq.core.limit_workflow_ports import WorkflowSignal as WorkflowSignal
from ledgerq.core.limit_workflow_ports import WorkflowStore as WorkflowStore
from ledgerq.core.requeue import DeadJobFilter, RequeueReport
from ledgerq.core.retention import HistoryTable
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
    batch_id: int | None = None
    """The job's batch: its final outcome may fire the batch's callbacks."""
    workflow_id: str | None = None
    """Set for a workflow step: its final outcome advances the workflow in the same write."""
    ran_seconds: float | None = None
    """How long the body ran (None: it never started, or not known): the job's
    ``started_at`` is written as the outcome's time less this, unless a start mark was."""


class JobStore(Protocol):
    """The SQL ledger of jobs."""

    def insert_jobs(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: object | None = None,
        on_commit: Callable[[list[EnqueueResult]], None] | None = None,
    ) -> list[EnqueueResult]:
        """Insert jobs in one bulk statement, in the caller's connection if one is given;
        ``on_commit(results)`` runs once the rows committed (with ``connection``: when the
        caller's transaction commits; never if it rolls back)."""

    def claim_jobs(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        limit: int,
        lease_seconds: float,
        job_ids: Sequence[int] | None = None,
    ) -> list[Job]:
        """Atomically move up to ``limit`` due ``queued`` jobs to ``running`` for ``worker_id``,
        by priority then age, incrementing each one's attempt. With ``job_ids`` (hints from
        the transport) only those jobs are candidates; the others are simply not returned."""

    def stage_due_jobs(self, *, limit: int = 1000) -> list[JobHint]:
        """Move ``scheduled`` and ``failed`` jobs whose run_at has come to ``queued``."""

    def seconds_until_due(self, *, queues: Sequence[str]) -> float | None:
        """Seconds (by the database clock) until the earliest job of these queues that waits
        for its time is due: delayed at enqueue or postponed by a limit (``scheduled``), or a
        retry (``failed``); None if none waits. Held jobs do not count (they wait for a start)."""

    def complete_jobs(self, completions: Sequence[Completion]) -> list[bool]:
        """Write a group of attempt outcomes in one transaction; fenced, one bool per item."""

    def mark_started(self, starts: Sequence[tuple[Claim, float]]) -> list[bool]:
        """Record that the bodies of running attempts started ``ago`` seconds before now
        (``(claim, ago)`` pairs; fenced); one bool per pair. The first start written stays."""

    def heartbeat_jobs(self, claims: Sequence[Claim], *, lease_seconds: float) -> list[bool]:
        """Extend the lease of running attempts; fenced, one bool per claim."""

    def requeue_jobs(
        self, claims: Sequence[Claim], *, unstarted: Collection[Claim] = ()
    ) -> list[bool]:
        """Put running attempts back to ``queued`` (graceful shutdown); fenced, one bool per
        claim, so repeating a requeue changes nothing (False) and the attempt is kept. The
        claims also in ``unstarted`` (their bodies never started) cost no attempt, as a
        postponed claim: ``max_attempts + 1`` and ``postponed + 1``."""

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

    def retry_dead_jobs(self, which: DeadJobFilter, *, dry_run: bool = False) -> RequeueReport:
        """Queue again, as ``retry_job`` does each, the ``dead`` jobs ``which`` selects, in
        chunks; fenced: only rows still ``dead`` when the update runs move. Workflow steps
        are left to their workflow's retry. ``dry_run`` moves nothing and counts the
        matches."""

    def start_job(self, job_id: int) -> Job:
        """Queue a ``held`` job now; raise ``InvalidTransition`` if it is not held."""

    def hints_for(self, job_ids: Sequence[int]) -> list[JobHint]:
        """Hints of those of ``job_ids`` that are ``queued`` now (to announce them)."""

    def count_waiting_to_start(self) -> dict[str, int]:
        """Per queue, ``running`` jobs whose body has not started (held in a prefetch)."""

    def count_jobs(self) -> dict[tuple[str, JobState], int]:
        """Number of jobs per (queue, state)."""

    def count_lifetime(self) -> list[LifetimeTotal]:
        """Jobs since the beginning per (queue, task): enqueued, succeeded, dead, cancelled,
        expired; rows deleted by retention included (see ``core/lifetime.py``)."""


@dataclass(frozen=True, slots=True)
class StuckReset:
    """What ``reset_stuck_jobs`` did: jobs put back to ``queued`` (to be announced again) and
    jobs that had spent their attempts and became ``dead``."""

    requeued: list[JobHint] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Purge:
    """Ids of the jobs ``purge_jobs`` deleted, by reason."""

    succeeded: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)


class LedgerRepair(Protocol):
    """What the reconciler needs from the ledger: repairs that are safe to repeat."""

    def exclusive(self, name: str) -> AbstractContextManager[bool]:
        """Try to hold the named fleet-wide lock for the block; yields whether it is held.
        A ledger of one host (SQLite) yields True to every caller: its repairs are safe to
        repeat, so nothing needs excluding there."""

    def reset_stuck_jobs(self, *, stuck_after_seconds: float, limit: int) -> StuckReset:
        """Put back running jobs with neither heartbeat nor progress for the given time;
        fenced, so an owner that heartbeats meanwhile keeps its job."""

    def queued_hints(self, *, waiting_seconds: float, limit: int) -> list[JobHint]:
        """Hints of ``queued`` jobs due for at least ``waiting_seconds`` (oldest first)."""

    def purge_jobs(
        self, *, succeeded_after_seconds: float, failed_after_seconds: float, limit: int
    ) -> Purge:
        """Delete finished jobs past their retention and unstarted jobs past ``expires_at``."""

    def purge_dedupe_windows(self, *, limit: int) -> int:
        """Delete up to ``limit`` expired dedupe windows (an expired window holds nothing);
        return how many went."""

    def advance_batches(self, *, limit: int) -> int:
        """Fire the due callbacks of up to ``limit`` unfinished batches (members that died by
        failover or were cancelled); return how many fired."""

    def prune_history(self, table: HistoryTable, *, older_than_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` rows of a history table older than the given age, in one
        short transaction, never a row still needed (see ``core.retention``); return how
        many went."""


class ControlChannel(Protocol):
    """A fast lane for fleet control messages (stop requests). A message carries no authority:
    it only wakes a worker, which then reads its stop request from the database and obeys that
    alone, so a forged message costs a read, a lost one a heartbeat interval."""

    def publish_stop(self, *, worker_id: str | None, mode: str) -> None:
        """Ask one worker (or, with None, every worker) to stop; ``mode`` is ``graceful`` or
        ``immediate``. Raise ``TransportError`` if the message could not be sent."""

    def subscribe_stops(self, handler: Callable[[str | None, str], None]) -> None:
        """Call ``handler(worker_id, mode)`` for every stop message, from a thread of its own,
        until the channel is closed. The arguments are claims of whoever published them.
        Subscribing starts in the background: messages sent before it listens are lost."""


class FinishSignal(Protocol):
    """Tells a waiting producer early that a job may have finished (``app.jobs.wait``); a
    hint only: the waiter reads the job to know."""

    def watch(self, job_id: int) -> threading.Event:
        """An event set when ``job_id`` may have finished; listening is in place on return."""

    def unwatch(self, job_id: int, event: threading.Event) -> None:
        """Forget a watch."""

    def close(self) -> None:
        """Release the underlying connection and wake every waiter."""


class Waker(Protocol):
    """Something that tells an idle fetcher early that new jobs may be there."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if woken by a signal of new work (a wake-up is
        consumed by the wait it ends)."""

    def rest(self) -> None:
        """Stop listening until the next ``wait`` (a fallback that is no longer used). That
        wait listens again and returns True at once: work committed meanwhile sent no signal
        it saw, so the caller should look once more."""

    def close(self) -> None:
        """Release the underlying connection."""


class Transport(Protocol):
    """Carries hints that jobs exist. Correctness never depends on it: the claim decides."""

    fallback_active: bool
    """True while a transport that failed polls the database instead."""

    carries_hints: bool
    """Whether ``push`` sends hints anywhere (False: the rows are the queue and a producer
    need not build them)."""

    def push(self, hints: Sequence[JobHint]) -> None:
        """Announce committed ``queued`` jobs; raise ``TransportError`` if that failed."""

    def carries_ids(self) -> bool:
        """Whether ``pull`` returns job ids right now (False: claim by query). May probe a
        transport that fell back to polling and switch back."""

    def pull(self, *, queues: Sequence[str], limit: int, timeout: float) -> list[int]:
        """Wait up to ``timeout`` for hints; return up to ``limit`` job ids to claim (empty:
        claim by query)."""

    def round_trip_seconds(self) -> float | None:
        """One round trip to the transport's server (health checks); None when there is no
        server or it does not answer."""

    def interrupt(self) -> None:
        """Wake a blocked ``pull`` at once (used at shutdown and when capacity frees); an
        interrupt before a ``pull`` ends that pull at once, so none is lost."""

    def close(self) -> None:
        """Release connections."""


class HintSender(Protocol):
    """Sends a producer's hints of committed jobs without making ``enqueue`` wait for the
    transport's reply: a thread of the producer's (``Announcer``) or writes whose replies are
    read later (``PipelinedPush``)."""

    @property
    def unsent(self) -> int:
        """Hints that may not have reached the transport (their jobs are found later)."""

    def submit(self, hints: Sequence[JobHint]) -> None:
        """Send (or queue for sending) hints of committed ``queued`` jobs; never raises for
        the transport's failures (they are counted in ``unsent``)."""

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait up to ``timeout`` seconds until every hint so far was sent (or counted
        unsent); True if none is left waiting."""

    def close(self, timeout: float = 2.0) -> None:
        """Send what waits (up to ``timeout`` seconds), then release what the sender holds."""


class WorkerStore(Protocol):
    """The fleet's registry as a worker process needs it. Writes of a worker that the fleet
    declared dead are refused, like fenced job writes."""

    def register_worker(self, registration: fleet.Registration) -> None:
        """Record the worker as ``active`` with fresh start and heartbeat times (database
        clock); a worker re-registering after a failover is made active again."""

    def heartbeat_worker(self, worker_id: str, pulse: fleet.Pulse) -> fleet.HeartbeatReply | None:
        """Renew the worker's heartbeat; None if refused (the worker is dead or unknown)."""

    def read_stop_request(self, worker_id: str) -> fleet.StopMode | None:
        """The stop request recorded for this active worker (None: none, or not active). The
        database is the only authority for stops: a control message merely prompts this read."""

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

    def fail_over_process(
        self, *, hostname: str, pid: int, detected_by: str
    ) -> list[fleet.FailoverEvent]:
        """Fail over at once the active workers of process ``pid`` on ``hostname``, which
        its supervisor saw die (no TTL to wait for): the same fenced moves and record as
        ``fail_over_workers``, one event per worker."""

    def defer_unknown_task(
        self, claim: Claim, *, policy: unknown_tasks.UnknownTaskPolicy
    ) -> unknown_tasks.Verdict | None:
        """A job of a task the claiming worker does not know: put it back to ``scheduled``
        (fenced, ``max_attempts + 1`` so no attempt is spent, a delay growing per put-back)
        unless no active worker of its queue declares the task and the policy's grace since
        its first put-back has passed (then nothing is written: the caller buries it). None
        if the claim is stale."""

    def count_ready_jobs(self, queues: Sequence[str]) -> int:
        """Due ``queued`` jobs of these queues, up to a small cap (a stall probe)."""


class SqlConnection(Protocol):
    """What ``LedgerQ.transaction`` needs of a caller's database connection (a SQLAlchemy
    ``Connection`` has it): whether a transaction is open, and beginning one."""

    def in_transaction(self) -> bool:
        """Whether a transaction is open on this connection."""
        ...

    def begin(self) -> AbstractContextManager[object]:
        """Begin a transaction, committed when the block ends without an error."""
        ...
