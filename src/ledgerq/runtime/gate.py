"""LimitGate: admits a claimed job of a limited task before its handler runs, or postpones it.

The gate sits after the claim (in the executor's slot thread, before the handler): the claim
stays one batched statement for every task, and only jobs of limited tasks pay for the checks.
A job held back by a limit goes back to ``scheduled`` with a fenced write that also raises its
``max_attempts`` by one, so waiting never spends the job's attempt budget (``attempt`` is the
fencing token and is never decremented). Order of the checks: breaker, concurrency, rate, so an
open circuit costs one read and no rate admission.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass

import structlog

from ledgerq.core import errors
from ledgerq.core import limits as lim
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import Claim, Job
from ledgerq.core.ports import Completion, LimitStore, RateLimitBackend
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskSpec
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.middleware import JobMiddleware

log = structlog.get_logger("ledgerq.gate")

#: Longest postponement of a job held back by a full rate window or concurrency limit.
MAX_SPREAD_SECONDS = 30.0
#: A job whose rate-limit turn comes within this many seconds waits for it in its slot.
HOLD_SECONDS = 0.5
#: Postponement range of a job waiting for a concurrency slot, in seconds.
SLOT_WAIT_SECONDS = (0.3, 1.5)


@dataclass(frozen=True, slots=True)
class _Held:
    """What an admitted attempt holds until its outcome is written."""

    slot: str | None
    breaker_name: str | None
    breaker: lim.Breaker | None


class LimitGate(JobMiddleware):
    """Checks the limits of each claimed job; thread-safe (one call per executor slot). The
    first job middleware (see ``runtime/middleware.py``)."""

    def __init__(self, store: LimitStore, rates: RateLimitBackend, codec: PayloadCodec) -> None:
        self._store = store
        self._rates = rates
        self._codec = codec
        self._held: dict[Claim, _Held] = {}
        self._lock = threading.Lock()
        # Recent denials per rate name (monotonic times): a long backlog is spread over more
        # time, so waiting jobs do not come back all at once and churn the ledger.
        self._denials: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}

    def before_start(self, ctx: JobContext, spec: TaskSpec | None) -> bool:
        """True: run the job now. False: it was postponed (or its claim is stale) and must not
        run. A failing limit store or key function never loses the job: it runs unlimited
        only if the store cannot even postpone it (the lease then returns it)."""
        limits = getattr(spec, "limits", None)
        if spec is None or limits is None:
            return True
        job = ctx.job
        claim = Claim(job.id, job.attempt)
        try:
            delay = self._check(job, spec, limits, claim)
        except errors.PayloadError:
            return True  # the executor fails the job with the payload error
        except errors.StoreError as exc:
            log.warning("limit check failed; postponing", job_id=job.id, error=str(exc))
            delay = random.uniform(*SLOT_WAIT_SECONDS)
        if delay is None:
            return True
        try:
            self._store.postpone_job(claim, delay_seconds=delay)
        except errors.StoreError as exc:
            # Not postponed and not run: the job stays running until its lease runs out and
            # the failover puts it back.
            log.warning("could not postpone a held-back job", job_id=job.id, error=str(exc))
        return False

    def _check(
        self, job: Job, spec: TaskSpec, limits: lim.TaskLimits, claim: Claim
    ) -> float | None:
        """None if admitted (and what it holds recorded), else the seconds to postpone."""
        args, kwargs = self._codec.decode_args(job.args_json)

        def name(kind: str, key_fn: lim.KeyFunction | None) -> str:
            try:
                return lim.limit_name(kind, spec.name, key_fn, args, kwargs)
            except ValueError as exc:
                log.warning("limit key failed; using the task-wide limit", error=str(exc))
                return lim.limit_name(kind, spec.name, None, (), {})

        breaker_name = None
        if limits.breaker is not None:
            breaker_name = name("breaker", limits.breaker.key)
            verdict, wait = self._store.admit_breaker(name=breaker_name, breaker=limits.breaker)
            if verdict is lim.Admission.WAIT:
                return wait + random.uniform(0.0, min(1.0, limits.breaker.reset_after / 4))
        slot = None
        if limits.concurrency is not None:
            slot = name("concurrency", limits.concurrency_key)
            if not self._store.acquire_slot(name=slot, limit=limits.concurrency, claim=claim):
                return random.uniform(*SLOT_WAIT_SECONDS)
        if limits.rate is not None:
            rate_name = name("rate", limits.rate_key)
            rate_wait = self._acquire_rate(rate_name, limits.rate)
            if rate_wait is not None:
                if slot is not None:
                    self._store.release_slot(name=slot, claim=claim)
                return rate_wait + self._spread(rate_name, limits.rate)
        with self._lock:
            self._held[claim] = _Held(slot, breaker_name, limits.breaker)
        return None

    def _acquire_rate(self, name: str, rate: lim.Rate) -> float | None:
        """None if admitted, else seconds until the window may have room. A job whose turn
        is near (``HOLD_SECONDS``) waits in its slot and asks again: a sliding window reopens
        exactly one period after each admission, and a job that came back later would leave
        that room unused (a saturated limit would run below its rate)."""
        deadline = time.monotonic() + HOLD_SECONDS
        while True:
            wait = self._ask_rate(name, rate)
            if wait is None or time.monotonic() + wait > deadline:
                return wait
            time.sleep(wait)

    def _ask_rate(self, name: str, rate: lim.Rate) -> float | None:
        """One question to the shared window. After a denial this process denies locally
        until the window may have room (it cannot open earlier), so waiting jobs do not each
        cost the shared store a round trip."""
        now = time.monotonic()
        with self._lock:
            blocked_until = self._blocked_until.get(name, 0.0)
        if now < blocked_until:
            return blocked_until - now
        decision = self._rates.acquire_rate(name=name, rate=rate)
        if decision.allowed:
            return None
        with self._lock:
            self._blocked_until[name] = now + decision.retry_after_seconds
        return decision.retry_after_seconds

    def _spread(self, name: str, rate: lim.Rate) -> float:
        """A random extra wait that grows with the backlog this worker sees for ``name``."""
        now = time.monotonic()
        with self._lock:
            recent = self._denials.setdefault(name, deque())
            recent.append(now)
            while recent and recent[0] < now - rate.period_seconds:
                recent.popleft()
            backlog_periods = max(1.0, len(recent) / rate.limit)
        return random.uniform(0.0, min(rate.period_seconds * backlog_periods, MAX_SPREAD_SECONDS))

    def after_written(self, completion: Completion, applied: bool, ctx: JobContext | None) -> None:
        """After an outcome was written: free the slot, count the run in its breaker."""
        with self._lock:
            held = self._held.pop(completion.claim, None)
        if held is None:
            return
        try:
            if held.slot is not None:
                self._store.release_slot(name=held.slot, claim=completion.claim)
            if applied and held.breaker is not None and held.breaker_name is not None:
                outcome = _breaker_outcome(completion.state)
                if outcome is not None:
                    self._store.record_breaker(
                        name=held.breaker_name, breaker=held.breaker, succeeded=outcome
                    )
        except errors.StoreError as exc:
            # A slot left behind is freed once its attempt stops running; a lost count only
            # delays the breaker.
            log.warning("could not settle limits", job_id=completion.claim.job_id, error=str(exc))

    def after_dropped(self, ctx: JobContext) -> None:
        """Drop what a run that never reports an outcome holds (its slot frees itself)."""
        with self._lock:
            self._held.pop(ctx.claim, None)


def _breaker_outcome(state: JobState) -> bool | None:
    """True for a success, False for a failure, None for outcomes a breaker ignores."""
    if state is JobState.SUCCEEDED:
        return True
    if state in (JobState.FAILED, JobState.DEAD):
        return False
    return None
