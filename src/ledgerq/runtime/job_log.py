"""The worker's own log line for each job's start and end, built on the same
``JobHooks`` the application uses.

Every line carries the job's task, id, queue and attempt (``attempt`` counts runs). An end line
also carries the outcome and the body's duration in milliseconds. A failed attempt is an INFO
line and a dead job a WARNING, always; the start line and the success line are written only
while ``every_job`` is on (``LEDGERQ_LOG_JOBS``, on by default), so a high-volume fleet can
keep its logs to what went wrong.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog

from ledgerq.runtime.job_hooks import JobHooks

if TYPE_CHECKING:
    from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.jobs")


def job_log_lines(*, every_job: bool) -> JobHooks:
    """The worker's job lines: start and end of every job, or only what went wrong."""
    return EveryJobLines() if every_job else FailureLines()


class FailureLines(JobHooks):
    """One line for each attempt that did not succeed."""

    def after_failure(self, ctx: JobContext, error: BaseException, will_retry: bool) -> None:
        """``job attempt failed; it will retry`` or ``job cancelled`` (from inside): INFO."""
        outcome = "failed" if will_retry else "cancelled"
        event = "job attempt failed; it will retry" if will_retry else "job cancelled"
        log.info(event, outcome=outcome, error=_describe(error), **_fields(ctx), **_duration(ctx))

    def when_dead(self, ctx: JobContext, error: BaseException) -> None:
        """``job dead``: a WARNING."""
        job = ctx.job
        log.warning(
            "job dead",
            outcome="dead",
            error=_describe(error),
            runs=job.runs,
            max_runs=job.max_runs,
            **_fields(ctx),
            **_duration(ctx),
        )


class EveryJobLines(FailureLines):
    """A line when each job starts and when each attempt ends, successful ones included.

    These two lines are written for every job, so they go through a logger bound once, when
    the worker is built (structlog's lazy proxy assembles a logger on every call: about half
    a line's cost). A logging configuration made after the worker was built does not reach
    them; ``structlog.testing.capture_logs`` does (it changes the processors in place)."""

    def __init__(self) -> None:
        self._log = log.bind()

    def before_start(self, ctx: JobContext) -> None:
        """``job started``: INFO."""
        self._log.info("job started", **_fields(ctx))

    def after_success(self, ctx: JobContext, result: object) -> None:
        """``job succeeded`` with its duration: INFO."""
        self._log.info("job succeeded", outcome="succeeded", **_fields(ctx), **_duration(ctx))


def _fields(ctx: JobContext) -> dict[str, Any]:
    # Explicit, not only from the job's log context: a timed-out job's end is reported from
    # the timeout monitor's thread, where that context is not set.
    job = ctx.job
    return {"task": job.task, "job_id": job.id, "queue": job.queue, "attempt": job.runs}


def _duration(ctx: JobContext) -> dict[str, float]:
    if ctx.started_mono is None:
        return {}
    return {"duration_ms": round((time.monotonic() - ctx.started_mono) * 1000.0, 3)}


def _describe(error: BaseException) -> str:
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name
