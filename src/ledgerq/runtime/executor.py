"""Executor: runs claimed jobs on a pool of threads (async handlers on one event loop) and
enforces per-job timeouts. The only place that catches a broad ``Exception`` (user code)."""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.outcomes import JobOutcome
from ledgerq.core.ports import Completion
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.runtime import outcomes
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.job_hooks import HookRunner
from ledgerq.runtime.log_context import JOB_LOG_CONTEXT
from ledgerq.runtime.prefetch import PrefetchRoom

log = structlog.get_logger("ledgerq.executor")

#: How long a timed-out sync job gets to unwind before its thread is written off and replaced.
ABANDON_AFTER_SECONDS = 1.0


class JobTimeout(BaseException):
    """Raised inside a sync handler's thread when its job passes its timeout. A BaseException,
    so handler code that catches ``Exception`` cannot swallow it."""


@dataclass(eq=False)
class _Run:
    ctx: JobContext
    spec: TaskSpec | None
    thread_id: int = 0
    started: float = 0.0
    finished: bool = False
    timed_out: bool = False
    in_handler: bool = False
    unwound: threading.Event | None = None  # made only for runs with a timeout
    value: object = None  # what the handler returned, for the application's hooks
    error: BaseException | None = None  # what it raised
    lock: threading.Lock = field(default_factory=threading.Lock)


def _limited(run: _Run) -> bool:
    """Whether the run's task has limits (its jobs may wait for an admission)."""
    return run.spec is not None and run.spec.limits is not None


class Executor:
    """A fixed number of execution slots. ``submit`` hands a job to a free slot; every finished
    attempt is reported exactly once through ``on_complete``."""

    def __init__(
        self,
        *,
        registry: TaskRegistry,
        codec: PayloadCodec,
        concurrency: int,
        on_complete: Callable[[Completion], None],
        prefetch: int | None = 0,
        on_skipped: Callable[[JobContext], None] | None = None,
        admit: Callable[[JobContext, TaskSpec | None], bool] | None = None,
        may_start: Callable[[JobContext], bool] | None = None,
        on_unknown: Callable[[JobContext], Completion | None] | None = None,
        on_hung: Callable[[JobContext], None] | None = None,
        hooks: HookRunner | None = None,
    ) -> None:
        """``prefetch``: jobs held beyond the running slots, or None to follow the job
        durations (see ``PrefetchRoom``). ``admit`` (optional) is asked before each handler
        runs; False: the job was held back (postponed by a limit) and its slot is free again.
        ``may_start`` (optional) is asked first whether the job is still this worker's to
        start (its lease may have lapsed, see ``LeaseGuard``); False: it is skipped.
        ``on_unknown`` (optional) takes a job of a task the registry lacks and returns its
        outcome, or None if it put the job back; without it such a job fails (and retries).
        ``on_hung`` (optional) hears of a timed-out job whose thread could not be stopped
        (blocked in C): only ending the process stops it (see ``Worker``). ``hooks`` (optional)
        are the application's ``JobHooks`` (``runtime/job_hooks.py``)."""
        self._hooks = hooks if hooks else None
        self._registry = registry
        self._may_start_job = may_start
        self._on_unknown = on_unknown
        self._on_hung = on_hung
        self._admit = admit
        self._on_skipped = on_skipped
        self._codec = codec
        self._concurrency = concurrency
        # Jobs may wait in the inbox beyond the running ones, so a slot never idles while
        # the next claim is on the wire.
        self._room = PrefetchRoom(concurrency, prefetch)
        self._on_complete = on_complete
        self._inbox: queue.SimpleQueue[_Run | None] = queue.SimpleQueue()
        self._busy = 0
        self._cond = threading.Condition()
        # Free slots a waiter of ``wait_for_free_slot`` needs: a finished job wakes it only
        # once that many are free, not on every completion (a wake-up per job costs a thread
        # switch and the GIL).
        self._wanted = 1
        self._deadlines: list[tuple[float, int, _Run]] = []
        # Its own condition: the slots' one is notified on every finished job, and the
        # timeout monitor should not wake for each of them.
        self._timer = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._draining = False
        self._loop = asyncio.new_event_loop()
        self._threads: list[threading.Thread] = []
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="ledgerq-async", daemon=True
        )
        self._monitor = threading.Thread(
            target=self._watch_deadlines, name="ledgerq-timeouts", daemon=True
        )

    def start(self) -> None:
        """Start the slot threads, the event loop and the timeout monitor."""
        self._loop_thread.start()
        self._monitor.start()
        for _ in range(self._concurrency):
            self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._serve, name="ledgerq-exec", daemon=True)
        self._threads.append(thread)
        thread.start()

    @property
    def capacity(self) -> int:
        """Jobs this executor accepts at once: running slots plus prefetch room."""
        return self._room.capacity

    @property
    def busy(self) -> int:
        """Slots currently running a job."""
        return self._busy

    def free_slots(self) -> int:
        """Jobs that could be accepted now (running slots plus prefetch room)."""
        with self._cond:
            return max(self._room.capacity - self._busy, 0)

    def wait_for_free_slot(self, timeout: float, at_least: int = 1) -> int:
        """Block until ``at_least`` jobs could be accepted (or ``timeout``); return that count."""
        wanted = min(max(at_least, 1), self._room.capacity)
        with self._cond:
            self._wanted = wanted
            self._cond.wait_for(
                lambda: self._room.capacity - self._busy >= wanted or self._stopped, timeout
            )
            self._wanted = 1
            return max(self._room.capacity - self._busy, 0)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no slot is busy; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def submit(self, ctx: JobContext) -> None:
        """Run ``ctx.job`` in a free slot (the caller checked ``free_slots``)."""
        spec = self._registry.get(ctx.job.task) if ctx.job.task in self._registry else None
        with self._cond:
            self._busy += 1
        self._inbox.put(_Run(ctx=ctx, spec=spec))

    def drain(self) -> None:
        """Run nothing more that has not started: the worker is shutting down and will put
        waiting jobs back. Jobs already running go on."""
        with self._cond:
            self._draining = True

    def stop(self) -> None:
        """Stop the slot threads once their current job ends, and the event loop."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        with self._timer:
            self._timer.notify_all()
        for _ in self._threads:
            self._inbox.put(None)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(5)
        if not self._loop_thread.is_alive():
            self._loop.close()

    # -- running one job ------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            run = self._inbox.get()
            if run is None:
                return
            if not self._may_start(run):
                self._release_slot(limited=_limited(run))
                continue
            run.thread_id = threading.get_ident()
            timeout = self._timeout_of(run)
            if timeout is not None and not (run.spec and run.spec.is_async):
                run.unwound = threading.Event()
                with self._timer:
                    heapq.heappush(self._deadlines, (run.started + timeout, next(self._seq), run))
                    self._timer.notify_all()
            job = run.ctx.job
            # Every log line of the job's handler carries the job's fields.
            fields = {"job_id": job.id, "queue": job.queue, "task": job.task, "attempt": job.runs}
            token = JOB_LOG_CONTEXT.set(fields)
            try:
                completion = self._execute(run, timeout)
            except JobTimeout:
                self._leave_handler(run)
                completion = None  # the monitor already recorded the timeout
            finally:
                JOB_LOG_CONTEXT.reset(token)
            if run.unwound is not None:
                run.unwound.set()
            self._finish(run, completion)
            if run.timed_out and threading.current_thread() not in self._threads:
                return  # this thread was written off and replaced while it hung

    def _may_start(self, run: _Run) -> bool:
        """Whether a job taken from the inbox may run now, marking its start if so (else its
        slot is released)."""
        if self._draining:
            return False  # not started; the worker puts it back
        if not run.ctx.owns_job or (
            self._may_start_job is not None and not self._may_start_job(run.ctx)
        ):
            return self._skip(run)  # failed over while prefetched: never run it
        if self._admit is not None and not self._admit(run.ctx, run.spec):
            return False  # held back by a limit: the worker postponed it
        run.started = time.monotonic()
        if not run.ctx.begin(run.started):
            return self._skip(run)  # put back unstarted while its admission was checked
        return True

    def _skip(self, run: _Run) -> bool:
        """A job taken away before it started: tell the worker (it never runs); False."""
        if self._on_skipped is not None:
            self._on_skipped(run.ctx)
        return False

    def _timeout_of(self, run: _Run) -> float | None:
        job_timeout = run.ctx.job.timeout_seconds
        if job_timeout is not None:
            return job_timeout
        return run.spec.timeout_seconds if run.spec else None

    def _execute(self, run: _Run, timeout: float | None) -> Completion | None:
        if self._hooks is None or run.spec is None:
            return self._outcome(run, timeout)
        self._hooks.before_start(run.ctx)
        completion = self._outcome(run, timeout)
        if completion is not None:
            self._hooks.report(run.ctx, completion.state, run.value, run.error)
        return completion

    def _outcome(self, run: _Run, timeout: float | None) -> Completion | None:
        job = run.ctx.job
        policy = run.spec.retry if run.spec else RetryPolicy()
        if run.spec is None:
            if self._on_unknown is not None:
                return self._on_unknown(run.ctx)
            exc = errors.TaskNotRegistered(job.task)
            return outcomes.failed(job, policy, "unknown_task", None, str(exc))
        try:
            args, kwargs = self._codec.decode_args(job.args_json)
            if run.spec.is_async:
                coro = run.spec.fn(run.ctx, *args, **kwargs)
                future = asyncio.run_coroutine_threadsafe(
                    asyncio.wait_for(coro, timeout), self._loop
                )
                value = future.result()
            else:
                value = self._call_sync(run, args, kwargs)
            ran = time.monotonic() - run.started
            run.value = value
            return outcomes.succeeded(job, self._encode_result(value), ran)
        except TimeoutError as exc:
            ran = time.monotonic() - run.started
            run.error = exc
            if run.spec.is_async and timeout is not None:
                message = f"job exceeded its timeout of {timeout:g} s"
                return outcomes.failed(job, policy, "timeout", None, message, ran)
            return outcomes.raised(job, policy, exc, ran)
        except JobOutcome as outcome:  # the handler decided: Retry, Cancel or Discard
            ran = time.monotonic() - run.started
            run.error = outcome
            return outcomes.asked(job, policy, outcome, ran)
        except Exception as exc:  # user code: record it on the job, never crash the worker
            ran = time.monotonic() - run.started
            run.error = exc  # the worker's job lines (``runtime/job_log.py``) report it
            return outcomes.raised(job, policy, exc, ran)

    def _call_sync(self, run: _Run, args: list[Any], kwargs: dict[str, Any]) -> Any:
        assert run.spec is not None
        try:
            with run.lock:
                run.in_handler = True
            return run.spec.fn(run.ctx, *args, **kwargs)
        finally:
            self._leave_handler(run)

    @staticmethod
    def _leave_handler(run: _Run) -> None:
        with run.lock:
            run.in_handler = False
            if run.timed_out:
                # Drop a JobTimeout still pending for this thread so it cannot hit the next job.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(run.thread_id), None)

    def _encode_result(self, value: Any) -> str | None:
        return None if value is None else self._codec.encode(value)

    def _finish(self, run: _Run, completion: Completion | None) -> None:
        with run.lock:
            if run.finished:
                return  # the timeout monitor reported this attempt already
            run.finished = True
        ran = completion.ran_seconds if completion is not None else None
        if completion is not None:
            self._on_complete(completion)
        if ran is None:
            ran = time.monotonic() - run.started
        self._release_slot(ran, limited=_limited(run))

    def _release_slot(self, ran_seconds: float | None = None, limited: bool = False) -> None:
        with self._cond:
            if limited:
                self._room.observe_limited()
            elif ran_seconds is not None:
                self._room.observe(ran_seconds)
            self._busy -= 1
            if self._busy == 0 or self._room.capacity - self._busy >= self._wanted:
                self._cond.notify_all()

    # -- timeouts ----------------------------------------------------------------------------

    def _watch_deadlines(self) -> None:
        while True:
            with self._timer:
                while not self._deadlines or self._deadlines[0][0] > time.monotonic():
                    if self._stopped and not self._deadlines:
                        return
                    wait = self._deadlines[0][0] - time.monotonic() if self._deadlines else 0.5
                    self._timer.wait(max(wait, 0.001))
                _, _, run = heapq.heappop(self._deadlines)
            self._expire(run)

    def _expire(self, run: _Run) -> None:
        with run.lock:
            if run.finished:
                return
            run.finished = True
            run.timed_out = True
            if run.in_handler:
                # Interrupts Python code at its next bytecode; a thread blocked in C stays
                # blocked and is written off below.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(run.thread_id), ctypes.py_object(JobTimeout)
                )
        timeout = self._timeout_of(run) or 0.0
        policy = run.spec.retry if run.spec else RetryPolicy()
        message = f"job exceeded its timeout of {timeout:g} s"
        log.warning(
            "job timed out", job_id=run.ctx.job_id, task=run.ctx.job.task, timeout_s=timeout
        )
        ran = time.monotonic() - run.started
        completion = outcomes.failed(run.ctx.job, policy, "timeout", None, message, ran)
        self._on_complete(completion)
        if self._hooks is not None:
            self._hooks.report(run.ctx, completion.state, None, TimeoutError(message))
        run.ctx.request_stop()
        threading.Thread(target=self._write_off, args=(run,), daemon=True).start()

    def _write_off(self, run: _Run) -> None:
        if run.unwound is not None and run.unwound.wait(ABANDON_AFTER_SECONDS):
            self._release_slot()
            return
        thread = next((t for t in self._threads if t.ident == run.thread_id), None)
        if thread is not None:
            # Abandon the hung thread: it leaves the pool, a fresh one takes its slot.
            log.warning("abandoning hung job thread", job_id=run.ctx.job_id)
            self._threads.remove(thread)
            self._spawn()
        self._release_slot()
        if self._on_hung is not None:
            self._on_hung(run.ctx)
