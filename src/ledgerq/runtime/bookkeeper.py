"""Bookkeeper: the jobs one worker holds and how each attempt ended there. It keeps the
in-flight table, the outcome counts and the job middleware's hooks (``runtime/middleware.py``)
in step with what the ledger accepted (the store writes the assignment history itself)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import Completion, JobStore, Transport
from ledgerq.core.tasks import TaskSpec
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.middleware import Hooks, JobMiddleware

log = structlog.get_logger("ledgerq.worker")


@dataclass
class WorkerStats:
    """What this worker did: attempts written per outcome state, refused stale writes, jobs
    put back at shutdown, and transport hints dropped because their claim failed."""

    outcomes: Counter[str] = field(default_factory=Counter)
    #: The sum of ``outcomes``, readable from any thread (summing the Counter while a new
    #: state is added would fail).
    written: int = 0
    refused: int = 0
    requeued: int = 0
    dropped_hints: int = 0


class Bookkeeper:
    """The in-flight table of one worker and the records of its attempts; thread-safe.

    ``middleware`` hooks run as the docstring of ``runtime/middleware.py`` orders them."""

    def __init__(
        self,
        store: JobStore,
        transport: Transport,
        *,
        middleware: Sequence[JobMiddleware] = (),
    ) -> None:
        self.stats = WorkerStats()
        self._store = store
        self._transport = transport
        self.hooks = Hooks(middleware)
        self._before_start = self.hooks.before_start  # one lookup less per job
        self._after_written = self.hooks.after_written
        self._inflight: dict[int, JobContext] = {}
        self._lock = threading.Lock()

    def held_jobs(self) -> list[JobContext]:
        """Contexts of the jobs this worker holds right now."""
        with self._lock:
            return list(self._inflight.values())

    def count_held(self) -> int:
        """How many jobs this worker holds right now."""
        with self._lock:
            return len(self._inflight)

    def holds_none(self) -> bool:
        """Whether this worker holds no job."""
        with self._lock:
            return not self._inflight

    def hold(self, ctx: JobContext) -> None:
        """Enter a freshly claimed job."""
        with self._lock:
            self._inflight[ctx.job_id] = ctx

    def mark_completing(self, completion: Completion) -> None:
        """Mark the held attempt that ``completion`` ends as being written."""
        with self._lock:
            ctx = self._inflight.get(completion.claim.job_id)
        if ctx is not None and ctx.claim.attempt == completion.claim.attempt:
            ctx.mark_completing()

    def before_start(self, ctx: JobContext, spec: TaskSpec | None) -> bool:
        """Run the middleware's ``before_start`` hooks; a job one of them put back is
        forgotten here, recorded as requeued."""
        for hook in self._before_start:
            if not hook(ctx, spec):
                self.set_aside(ctx)
                return False
        return True

    def set_aside(self, ctx: JobContext) -> None:
        """Forget a job the worker put back itself before running it (postponed by a limit,
        deferred for an unknown task); the store recorded its attempt as requeued."""
        with self._lock:
            if self._inflight.get(ctx.job_id) is ctx:
                del self._inflight[ctx.job_id]

    def record_written(self, written: Sequence[tuple[Completion, bool]]) -> None:
        """Record completions the ledger applied (True) or refused as stale (False)."""
        ended: list[JobContext | None] = []  # the held context of each, for the hooks
        with self._lock:
            for completion, applied in written:
                ctx = self._inflight.get(completion.claim.job_id)
                if ctx is not None and ctx.claim.attempt == completion.claim.attempt:
                    del self._inflight[completion.claim.job_id]
                else:
                    ctx = None
                ended.append(ctx)
                if applied:
                    self.stats.outcomes[completion.state.value] += 1
                    self.stats.written += 1
                else:
                    self.stats.refused += 1
        hooks = self._after_written
        if hooks:
            for (completion, applied), ctx in zip(written, ended, strict=True):
                for hook in hooks:
                    hook(completion, applied, ctx)

    def forget(self, ctx: JobContext) -> None:
        """Drop a run the worker no longer owns (it never reports an outcome)."""
        for hook in self.hooks.after_dropped:
            hook(ctx)
        with self._lock:
            held = self._inflight.get(ctx.job_id)
            if held is not ctx:
                return  # forgotten already (abandoned, then skipped by its slot)
            del self._inflight[ctx.job_id]

    def put_back_unfinished(self) -> None:
        """Requeue every job still held (at shutdown), stop their handlers, and announce the
        jobs put back. A job whose body never started (prefetched, or drained from a slot)
        is kept from starting and put back at no attempt's cost (``requeue_jobs``). A job
        whose run already ended (its outcome reached the completer after the last flush) is
        left to the completer, which writes the outcome as it stops: put back, it would run
        again although it had finished."""
        contexts = [c for c in self.held_jobs() if not c.completing]
        if not contexts:
            return
        unstarted = [c.claim for c in contexts if not c.take_back()]
        try:
            applied = self._store.requeue_jobs([c.claim for c in contexts], unstarted=unstarted)
        except errors.StoreError as exc:
            # The leases still expire, and the rescuer will requeue these jobs.
            log.error("could not put jobs back", error=str(exc), jobs=len(contexts))
            applied = [False] * len(contexts)
        # Only after the put-back: a handler that returns when asked to stop must not get
        # its early return recorded as the job's outcome.
        for ctx in contexts:
            ctx.mark_lost()
            ctx.request_stop()
        self.stats.requeued += sum(applied)
        log.info("unfinished jobs put back to queued", jobs=sum(applied))
        hints = [c.job.hint for c, ok in zip(contexts, applied, strict=True) if ok]
        with contextlib.suppress(errors.TransportError):
            self._transport.push(hints)  # else idle workers and the reconciler find them
