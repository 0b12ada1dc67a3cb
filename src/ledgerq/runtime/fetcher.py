"""Fetcher: claims due jobs in batches as slots free up, and waits on the transport when idle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from ledgerq.core import errors
from ledgerq.core.job import Job
from ledgerq.core.operations import CompletionBacklog, EventSink, HintsDropped
from ledgerq.core.ports import JobStore, Transport
from ledgerq.runtime.completer import Backlog
from ledgerq.runtime.executor import Executor

log = structlog.get_logger("ledgerq.fetcher")

#: A burst worker does not exit while a job of its queues is due within this many seconds: a
#: retry, a job a limit postponed, or one delayed at enqueue (``--delay``). Jobs due later are
#: left for the next worker; ``worker start --help`` and the README say so.
BURST_HORIZON_SECONDS = 10.0

#: Longest wait for more free slots when there is a backlog, before claiming what is free.
BATCH_WAIT_SECONDS = 0.002

#: After a hand-over in which some ids failed their claim, claim by query this long after it.
#: An id can arrive before its row is visible: a producer's transaction announces its jobs from
#: SQLAlchemy's commit event, which fires just before the commit itself; and under a steady
#: flow of hints nothing else would look for such a job until the reconciler re-sends it.
RECHECKS_AFTER_DROP_SECONDS = (0.05, 0.25, 1.0)

#: The fetcher claims nothing while a finished job's outcome has waited this long to be
#: written, or while this many outcomes wait: a worker must not run more work than it can
#: record (a completion write can hang, e.g. on a commit waiting for a synchronous standby
#: that is gone, while claims, which do not wait for the standby, still succeed). A group
#: write normally takes milliseconds; one full group (``MAX_GROUP``) is the count bound.
HOLD_BACK_AFTER_SECONDS = 1.0
HOLD_BACK_PENDING = 500

#: While holding back, the warning (and the backlog event) repeats this often.
HOLD_BACK_REPORT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """How the fetcher claims: from which queues, how many per round trip, how often."""

    queues: tuple[str, ...]
    worker_id: str
    concurrency: int = 8
    batch_size: int = 32
    poll_interval_seconds: float = 1.0
    lease_seconds: float = 15.0
    burst: bool = False
    max_jobs: int | None = None


class Fetcher:
    """Runs on its own thread until stopped, the job budget is spent, or (burst) the queues
    are empty and every slot is idle."""

    def __init__(
        self,
        store: JobStore,
        transport: Transport,
        executor: Executor,
        policy: FetchPolicy,
        on_claimed: Callable[[Job, float], None],
        is_settled: Callable[[], bool],
        events: EventSink | None = None,
        backlog: Callable[[], Backlog] | None = None,
    ) -> None:
        """``backlog`` (the completer's) tells how many outcomes wait to be written; while
        they wait too long, nothing is claimed."""
        self._store = store
        self._backlog = backlog
        self._holding_since: float | None = None
        self._next_report = 0.0
        self._transport = transport
        self._executor = executor
        self._policy = policy
        self._on_claimed = on_claimed
        self._is_settled = is_settled
        self._events = events
        self._stop = threading.Event()
        self._claimed = 0
        self._staged_before_exit = False
        self._by_query = False
        self._rechecks: list[float] = []  # monotonic times of query claims after dropped ids
        self.dropped_hints = 0
        """Ids from the transport whose claim failed (already taken, finished, unknown)."""
        self._last_fetch = time.monotonic()
        #: Seconds to wait per slot's worth of jobs claimed, asked before each claim while there
        #: is a backlog (fair sharing; None: never wait).
        self.pace: Callable[[], float] | None = None
        #: Monotonic time of the first full claim since the last claim that found nothing: when
        #: the current backlog began (None: no backlog). Fair sharing counts from there.
        self.backlog_since: float | None = None
        self._last_batch = 0
        self.thread = threading.Thread(target=self.run, name="ledgerq-fetcher", daemon=True)

    def stop(self) -> None:
        """Stop claiming (a blocked wait returns promptly)."""
        self._stop.set()
        self._transport.interrupt()

    def last_fetch_age(self) -> float:
        """Seconds since the last claim round trip that succeeded (or since start): a worker
        that is alive but no longer consuming shows a growing age."""
        return time.monotonic() - self._last_fetch

    def run(self) -> None:
        """The fetch loop."""
        backoff = 0.1
        backlog = False
        while not self._stop.is_set() and not self._budget_spent():
            if self._executor.wait_for_free_slot(0.25) == 0 or self._holding_back():
                continue
            if backlog and self.pace is not None and (pause := self.pace()) > 0:
                # Ahead of the peers: let them catch up. The pause grows with the last batch,
                # so the throttle per job holds when the prefetch (and so the batch) grows.
                scale = max(self._last_batch, 1) / self._policy.concurrency
                self._stop.wait(pause * scale)
            if backlog:
                # More jobs are waiting: give the slots a moment to free up so one round trip
                # claims a batch instead of one job.
                self._executor.wait_for_free_slot(BATCH_WAIT_SECONDS, at_least=self._batch_target())
            hinted = False
            try:
                if self._transport.carries_ids() and not self._by_query and not self._recheck_due():
                    hinted = True
                    outcome = self._fetch_hinted()
                    if outcome is not None:
                        backoff = 0.1
                        backlog = outcome
                        self._track_backlog(full=outcome, empty=False)
                        continue
                claimed, asked = self._fetch_once()
                if self._rechecks:  # this claim by query served the rechecks now due
                    now = time.monotonic()
                    self._rechecks = [at for at in self._rechecks if at > now]
                backoff = 0.1
                backlog = asked > 0 and claimed == asked
                self._track_backlog(full=backlog, empty=asked > 0 and claimed == 0)
                # Hints ran dry while the ledger still had a full batch (ids lost in Redis or
                # never sent): keep claiming by query until the backlog is gone.
                self._by_query = (hinted or self._by_query) and backlog
            except (errors.StoreError, errors.TransportError) as exc:
                log.warning("claim failed; retrying", error=str(exc), backoff_s=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if claimed == 0 and asked > 0 and self._found_nothing(hinted):
                return

    def _track_backlog(self, *, full: bool, empty: bool) -> None:
        if full and self.backlog_since is None:
            self.backlog_since = time.monotonic()
        elif empty:
            self.backlog_since = None

    def _holding_back(self) -> bool:
        """Whether finished jobs' outcomes have waited too long to be written to claim more
        (then after a short pause); says so when holding back begins, every
        ``HOLD_BACK_REPORT_SECONDS`` while it lasts, and when it ends."""
        if self._backlog is None:
            return False
        backlog = self._backlog()
        now = time.monotonic()
        if backlog.oldest_seconds < HOLD_BACK_AFTER_SECONDS and backlog.pending < HOLD_BACK_PENDING:
            if self._holding_since is not None:
                log.info(
                    "outcomes written; claiming again", held_s=round(now - self._holding_since, 1)
                )
                self._holding_since = None
                if self._events is not None:
                    self._events.emit(CompletionBacklog(0, 0.0))
            return False
        if self._holding_since is None:
            self._holding_since = now
            self._next_report = now
        if now >= self._next_report:
            self._next_report = now + HOLD_BACK_REPORT_SECONDS
            log.warning(
                "claims held back: finished jobs' outcomes are not written yet",
                pending=backlog.pending,
                oldest_s=round(backlog.oldest_seconds, 1),
                held_s=round(now - self._holding_since, 1),
            )
            if self._events is not None:
                self._events.emit(CompletionBacklog(backlog.pending, backlog.oldest_seconds))
        self._stop.wait(0.05)
        return True

    def _found_nothing(self, hinted: bool) -> bool:
        """The queues gave nothing: True if a burst worker is done; else wait for work
        (unless a hinted pull already waited)."""
        if self._policy.burst and self._is_settled():
            if not self._staged_before_exit:
                # Stage once more before concluding the queues are empty.
                self._staged_before_exit = True
                self._store.stage_due_jobs()
                return False
            if not self._job_due_soon():
                # The stager thread may have queued a due job between our last claim and the
                # due check (its row then looked locked to our own staging): claim once more.
                if self._fetch_once()[0]:
                    return False
                log.info(
                    "burst: nothing queued or due soon, stopping",
                    horizon_seconds=BURST_HORIZON_SECONDS,
                )
                return True
        if not hinted and not self._transport.carries_ids():
            # Polling: wait for a wake-up. A transport of ids is waited on by the next
            # hinted pull instead, which claims what it pops.
            wait = 0.02 if self._policy.burst else self._policy.poll_interval_seconds
            self._transport.pull(queues=self._policy.queues, limit=0, timeout=wait)
        return False

    def _fetch_hinted(self) -> bool | None:
        """Claim the jobs whose ids the transport hands over; return whether more seem to wait
        (Redis handed over as many ids as asked for), or None when no hint came within the
        poll interval (the caller then claims by query, the safety net for lost ids)."""
        limit = self._limit()
        if limit <= 0:
            return False
        wait = 0.02 if self._policy.burst else self._policy.poll_interval_seconds
        if self._rechecks:
            wait = max(min(wait, self._rechecks[0] - time.monotonic()), 0.001)
        ids = self._transport.pull(queues=self._policy.queues, limit=limit, timeout=wait)
        if not ids:
            return None
        sent = time.monotonic()
        jobs = self._store.claim_jobs(
            queues=self._policy.queues,
            worker_id=self._policy.worker_id,
            limit=len(ids),
            lease_seconds=self._policy.lease_seconds,
            job_ids=ids,
        )
        # Taken by another worker, finished, cancelled, not yet due or unknown: dropped.
        dropped = len(ids) - len(jobs)
        if dropped:
            self.dropped_hints += dropped
            if self._events is not None:
                self._events.emit(HintsDropped(dropped))
            now = time.monotonic()
            self._rechecks = [now + delay for delay in RECHECKS_AFTER_DROP_SECONDS]
        self._accept(jobs, sent)
        return len(ids) == limit and bool(jobs)

    def _recheck_due(self) -> bool:
        """Whether a query claim after dropped ids is due now (it is then taken off the list)."""
        if self._rechecks and self._rechecks[0] <= time.monotonic():
            del self._rechecks[0]
            return True
        return False

    def _batch_target(self) -> int:
        # With prefetch, claim once half the room is free, so the other half keeps the slots
        # busy during the round trip; without, wait for every slot.
        capacity = self._executor.capacity
        target = capacity // 2 if capacity > self._policy.concurrency else capacity
        return min(self._policy.batch_size, max(target, 1))

    def _job_due_soon(self) -> bool:
        """In burst mode, wait for jobs due within ``BURST_HORIZON_SECONDS`` (retries,
        postponed and delayed jobs); True while one is, after waiting a poll interval."""
        due = self._store.seconds_until_due(queues=self._policy.queues)
        if due is None or due > BURST_HORIZON_SECONDS:
            return False
        self._stop.wait(min(due, self._policy.poll_interval_seconds))
        self._staged_before_exit = False
        return True

    @property
    def budget_spent(self) -> bool:
        """Whether the job budget (``max_jobs``) is used up."""
        return self._budget_spent()

    def _budget_spent(self) -> bool:
        return self._policy.max_jobs is not None and self._claimed >= self._policy.max_jobs

    def _limit(self) -> int:
        limit = min(self._executor.free_slots(), self._policy.batch_size)
        if self._policy.max_jobs is not None:
            limit = min(limit, self._policy.max_jobs - self._claimed)
        return limit

    def _fetch_once(self) -> tuple[int, int]:
        limit = self._limit()
        if limit <= 0:
            return 0, 0
        sent = time.monotonic()
        jobs = self._store.claim_jobs(
            queues=self._policy.queues,
            worker_id=self._policy.worker_id,
            limit=limit,
            lease_seconds=self._policy.lease_seconds,
        )
        self._accept(jobs, sent)
        return len(jobs), limit

    def _accept(self, jobs: list[Job], sent: float) -> None:
        """Hand claimed jobs on; ``sent`` is when the claim was sent (their lease's start by
        this process's clock, or a little before it)."""
        self._last_fetch = time.monotonic()
        self._claimed += len(jobs)
        if jobs:
            self._staged_before_exit = False
            self._last_batch = len(jobs)
        for job in jobs:
            self._on_claimed(job, sent)
        if jobs:
            # Let a woken slot thread take the GIL now: the next pull's Python work would
            # otherwise hold it (up to the switch interval) before its socket wait frees it.
            time.sleep(0)
