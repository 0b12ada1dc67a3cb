"""Worker: one process's services, started as one group in a fixed order and stopped in
reverse (``Worker._group``; the list is in docs/architecture.md), and the graceful shutdown
between them, which finishes in-flight jobs within a grace period and puts back the rest."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable

import structlog

from ledgerq.core import errors, fleet
from ledgerq.core.job import Job
from ledgerq.core.ports import Completion
from ledgerq.core.unknown_tasks import UnknownTaskPolicy
from ledgerq.runtime.bookkeeper import Bookkeeper, WorkerStats
from ledgerq.runtime.completer import Completer
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.deferrer import Deferrer
from ledgerq.runtime.executor import Executor
from ledgerq.runtime.fetcher import Fetcher, FetchPolicy
from ledgerq.runtime.heartbeater import Heartbeater
from ledgerq.runtime.janitor import Janitor
from ledgerq.runtime.job_hooks import HookRunner
from ledgerq.runtime.lease import LeaseGuard
from ledgerq.runtime.membership import Membership
from ledgerq.runtime.pacer import Pacer
from ledgerq.runtime.reconciler import Reconciler
from ledgerq.runtime.service import Service, ServiceGroup, Steps
from ledgerq.runtime.spool_drainer import SpoolDrainer
from ledgerq.runtime.stager import Stager
from ledgerq.runtime.starts import StartMarks
from ledgerq.runtime.worker_setup import WorkerDeps, WorkerOptions

log = structlog.get_logger("ledgerq.worker")


#: Shortest window over which fair sharing compares rates: long enough that a worker that fell
#: behind (less CPU for a while) catches up in jobs, not only in rate.
PACE_WINDOW_SECONDS = 60.0

#: Seconds between a worker's checks whether the ledger's tables need maintenance.
MAINTAIN_INTERVAL_SECONDS = 15.0

#: At shutdown, the longest wait for the outcomes of finished jobs to be written.
COMPLETION_FLUSH_SECONDS = 30.0


def new_worker_id() -> str:
    """host:pid:random, so two hosts with the same name never collide."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Runs jobs until stopped. ``run()`` blocks; ``request_stop()`` may be called from a
    signal handler (it only sets flags)."""

    def __init__(
        self, deps: WorkerDeps, options: WorkerOptions, worker_id: str | None = None
    ) -> None:
        """A worker of ``deps`` run as ``options`` say, registered as ``worker_id`` (a fresh
        id when None)."""
        self.id = worker_id or new_worker_id()
        self.options = options
        store, transport, events = deps.store, deps.transport, deps.events
        fleet_store = deps.fleet_store
        self._store = store
        self._transport = transport
        self._control = deps.control
        self._stop_requested = False
        self._immediate = False
        self._writes_stuck = False  # the outcomes could not be written at shutdown
        self._recycle = False
        tasks = tuple(spec.name for spec in deps.registry)
        self.membership = (
            Membership(fleet_store, self, options, self.id, tasks=tasks, events=events)
            if fleet_store is not None
            else None
        )
        self._book = Bookkeeper(store, transport, middleware=deps.middleware)
        deferrer = (
            Deferrer(
                fleet_store,
                self._book,
                UnknownTaskPolicy(grace_seconds=options.unknown_task_grace_seconds),
                events=events,
            )
            if fleet_store is not None
            else None
        )
        self.stats = self._book.stats
        self._completer = Completer(store, self._book.record_written, events=events)
        self._starts = StartMarks(store, self.running_jobs)
        self._leases = LeaseGuard(
            store,
            lease_seconds=options.lease_seconds,
            heartbeat_interval_seconds=options.heartbeat_interval_seconds,
            renew_worker=self.membership.renew if self.membership is not None else None,
        )
        self._executor = Executor(
            registry=deps.registry,
            codec=deps.codec,
            concurrency=options.concurrency,
            on_complete=self._on_attempt_done,
            prefetch=options.prefetch,
            on_skipped=self._book.forget,
            admit=self._book.before_start if self._book.hooks.before_start else None,
            may_start=self._leases.may_start,
            on_unknown=deferrer.handle if deferrer is not None else None,
            on_hung=self._on_hung if options.recycle_when_hung else None,
            hooks=HookRunner(deps.job_hooks),
        )
        policy = FetchPolicy(
            queues=options.queues,
            worker_id=self.id,
            concurrency=options.concurrency,
            batch_size=options.batch_size,
            poll_interval_seconds=options.poll_interval_seconds,
            lease_seconds=options.lease_seconds,
            burst=options.burst,
            max_jobs=options.max_jobs,
        )
        self._fetcher = Fetcher(
            store,
            transport,
            self._executor,
            policy,
            self._on_claimed,
            self._is_settled,
            events=events,
            backlog=self._completer.backlog,
        )
        self._janitor = Janitor(store, interval_seconds=MAINTAIN_INTERVAL_SECONDS)
        self._stager = Stager(store, transport, interval_seconds=options.poll_interval_seconds)
        self._reconciler: Reconciler | None = None
        if options.reconcile is not None and deps.repair is not None:
            self._reconciler = Reconciler(
                deps.repair,
                store,
                transport,
                options.reconcile,
                events=events,
                workflows=deps.workflows,
            )
        self._drainer = (
            SpoolDrainer(deps.spool, store, transport) if deps.spool is not None else None
        )
        self._heartbeater = Heartbeater(
            store,
            self.running_jobs,
            interval_seconds=options.heartbeat_interval_seconds,
            lease_seconds=options.lease_seconds,
        )
        self._pacer = Pacer(
            window_seconds=max(12 * options.heartbeat_interval_seconds, PACE_WINDOW_SECONDS)
        )
        self._group = self._services()

    def _services(self) -> ServiceGroup:
        """The worker's services in start order; they stop in reverse. The feeders (stager,
        reconciler, fetcher) start last and stop first; then the jobs in hand are finished
        or put back while the heartbeats still run; the ledger writers stop last, and the
        transport closes after them."""
        writers: list[Service] = [self._completer]
        if self.membership is not None:
            writers.insert(0, self.membership)
        feeders: list[Service] = [self._stager]
        if self._reconciler is not None:
            feeders.append(self._reconciler)
        if self._drainer is not None:
            feeders.append(self._drainer)
        ledger = ServiceGroup(writers)
        return ServiceGroup(
            [
                Steps(stop=self._transport.close),
                Steps(ledger.start, lambda: self._stop_writers(ledger)),
                Steps(start=self._subscribe_stops),
                self._executor,
                self._heartbeater,
                self._starts,
                self._janitor,
                Steps(stop=self._finish_jobs),
                *feeders,
                Steps(self._fetcher.thread.start, self._stop_fetching),
            ]
        )

    def running_jobs(self) -> list[JobContext]:
        """Contexts of the jobs this worker holds right now."""
        return self._book.held_jobs()

    def transport_fallback_active(self) -> bool:
        """Whether this worker polls the database because its Redis transport failed."""
        return self._transport.fallback_active

    def readiness(self) -> dict[str, tuple[bool, str]]:
        """Readiness checks by name, each (ok, detail): ``running`` (not stopping), and with a
        fleet store ``database`` and ``consuming`` (see ``Registrar.readiness``)."""
        checks = {"running": (False, "stopping") if self._stop_requested else (True, "running")}
        if self.membership is not None:
            checks.update(self.membership.registrar.readiness())
        return checks

    @property
    def budget_spent(self) -> bool:
        """Whether the worker ended because it claimed its ``max_jobs``."""
        return self._fetcher.budget_spent

    @property
    def stop_requested(self) -> bool:
        """Whether a stop was asked for."""
        return self._stop_requested

    def _on_stop_message(self, worker_id: str | None, mode: str) -> None:
        # Anyone who can reach Redis can publish this, so it carries no authority: it only
        # makes the registrar read this worker's stop request from the database at once
        # (``worker stop`` writes it there before publishing). ``mode`` is not trusted.
        del mode
        if self.membership is not None and worker_id in (None, self.id):
            self.membership.check_stop_request()

    @property
    def recycle_requested(self) -> bool:
        """Whether the worker stopped because a timed-out job's thread could not be stopped:
        its process must end (or be replaced) so the job's code cannot go on."""
        return self._recycle

    def _on_hung(self, ctx: JobContext) -> None:
        # The job's timeout was recorded and it will be retried, but its thread is blocked in
        # C and may still finish its side effects: only ending the process stops it. Stop at
        # once (the other jobs are put back) so the caller can end or replace the process.
        log.error(
            "a timed-out job's thread cannot be stopped (blocked in C); recycling the worker"
            " process so its code cannot go on",
            job_id=ctx.job_id,
            task=ctx.job.task,
            attempt=ctx.attempt,
        )
        self._recycle = True
        # Start nothing more from now on: the main loop notices the stop only at its next
        # check, and a job started meanwhile would be abandoned by the recycle, put back while
        # running and run again. Not started, it goes back as a postponement.
        self._executor.drain()
        self.request_stop(immediate=True)

    def request_stop(self, *, immediate: bool = False) -> None:
        """Ask for a graceful stop; ``immediate`` skips the grace period. Signal-safe."""
        self._immediate = self._immediate or immediate
        self._stop_requested = True

    def run(self, *, on_started: Callable[[], None] | None = None) -> WorkerStats:
        """Run until stopped, the job budget is spent, or (burst) the queues are empty;
        ``on_started`` is called once every service runs (the command line resumes Python's
        garbage collector there)."""
        log.info(
            "worker starting",
            worker_id=self.id,
            queues=list(self.options.queues),
            concurrency=self.options.concurrency,
        )
        self._group.start()
        if on_started is not None:
            on_started()
        # Join in short slices so a signal handler's flag is seen promptly.
        while self._fetcher.thread.is_alive() and not self._stop_requested:
            self._fetcher.thread.join(0.05)
        self._group.stop()
        log.info("worker stopped", worker_id=self.id, **dict(self.stats.outcomes))
        # Internal counters (also in the metrics and ``worker start --json``), for debugging.
        log.debug(
            "worker counters",
            worker_id=self.id,
            dropped_hints=self.stats.dropped_hints,
            refused=self.stats.refused,
        )
        return self.stats

    def _subscribe_stops(self) -> None:
        if self._control is not None and self.membership is not None:
            # Without a fleet store no stop request exists to read, so nothing to wake for.
            self._control.subscribe_stops(self._on_stop_message)

    def _stop_fetching(self) -> None:
        self._fetcher.stop()
        self._fetcher.thread.join()
        self.stats.dropped_hints = self._fetcher.dropped_hints

    def _finish_jobs(self) -> None:
        """Let the jobs in hand finish (within the grace period on a requested stop), write
        their outcomes and put the unfinished ones back."""
        if not self._stop_requested:
            # A natural end (burst, --once): let in-flight jobs finish, unless a signal
            # arrives meanwhile and turns this into a graceful stop.
            while not self._executor.wait_idle(0.1) and not self._stop_requested:
                pass
        if self._stop_requested:
            self._executor.drain()  # prefetched jobs that have not started are put back
            grace = 0.0 if self._immediate else self.options.shutdown_grace_seconds
            if not self._wait_idle(grace):
                log.warning("grace period over; putting unfinished jobs back", grace_s=grace)
        if self._completer.flush(COMPLETION_FLUSH_SECONDS):
            self._book.put_back_unfinished()
        else:
            self._writes_stuck = True
            # Writes do not get through (a commit that waits for a synchronous standby that is
            # gone waits forever): every further write would hang the exit too.
            backlog = self._completer.backlog()
            log.error(
                "outcomes of finished jobs could not be written; exiting without them:"
                " the fleet fails this worker over and runs their jobs again",
                pending=backlog.pending,
                waited_s=round(backlog.oldest_seconds, 1),
            )

    def _stop_writers(self, writers: ServiceGroup) -> None:
        # When the outcomes could not be written the ledger takes no writes: stopping the
        # completer and deregistering would hang the exit too (the fleet fails this worker
        # over). Outcomes that arrived after the flush do not say so: a handler that returns
        # once its job was put back adds one (fenced, it changes nothing), and the completer
        # writes it as it stops.
        if not self._writes_stuck:
            writers.stop()

    def _wait_idle(self, grace: float) -> bool:
        # Slices, so a second signal (immediate) cuts the grace period short.
        remaining = grace
        while remaining > 0 and not self._immediate:
            if self._executor.wait_idle(min(remaining, 0.1)):
                return True
            remaining -= 0.1
        return self._executor.busy == 0

    def _on_attempt_done(self, completion: Completion) -> None:
        # Marked before the write: a heartbeat racing the completion is then refused
        # without the job being taken for lost.
        self._book.mark_completing(completion)
        self._completer.add(completion)

    def _on_claimed(self, job: Job, sent_at: float) -> None:
        ctx = JobContext(job, confirmed_at=sent_at)
        self._book.hold(ctx)
        self._executor.submit(ctx)

    def _is_settled(self) -> bool:
        return self._book.holds_none() and self._executor.busy == 0

    # -- fleet membership (see runtime/membership.py) ----------------------------------------

    def pulse(self) -> fleet.Pulse:
        """What the heartbeat reports: jobs in flight and done, age of the last fetch."""
        in_flight = self._book.count_held()
        done = self.stats.written
        rate = self._pacer.sample(done, self._fetcher.backlog_since)
        return fleet.Pulse(in_flight, done, self._fetcher.last_fetch_age(), rate)

    def lease_confirmed(self, sent_at: float) -> None:
        """The ledger renewed this worker's registration with a write sent at ``sent_at``."""
        self._leases.worker_confirmed(sent_at)

    def announce_requeued(self, job_ids: list[int]) -> None:
        """Announce jobs a failover put back (they are in the ledger whatever happens)."""
        try:
            self._transport.push(self._store.hints_for(job_ids))
        except (errors.StoreError, errors.TransportError) as exc:
            log.warning("could not announce failed-over jobs", error=str(exc))

    def transport_round_trip_ms(self) -> float | None:
        """Round trip to Redis in ms (None with polling, or while Redis does not answer)."""
        seconds = self._transport.round_trip_seconds()
        return None if seconds is None else seconds * 1000.0

    def share_with_peers(self, peers_per_slot: float | None) -> None:
        """Fair sharing: slow the claims down while ahead of the peers' mean rate per slot
        (times this worker's own slots: shares are proportional to concurrency)."""
        expected = None if peers_per_slot is None else peers_per_slot * self.options.concurrency
        self._pacer.adjust(expected)
        self._fetcher.pace = None if expected is None else self._pace_now

    def _pace_now(self) -> float:
        return self._pacer.delay_now(self.stats.written)

    def abandon_lost_jobs(self) -> int:
        """Heartbeat every held job now; give up (stop and forget) those the ledger refused,
        so none of them is started or written again. Return how many were abandoned."""
        try:
            self._heartbeater.beat()
        except errors.StoreError as exc:
            log.warning("could not check which jobs are still owned", error=str(exc))
            return 0
        lost = [ctx for ctx in self.running_jobs() if not ctx.owns_job and not ctx.completing]
        for ctx in lost:
            ctx.request_stop()
            self._book.forget(ctx)
        return len(lost)
