"""Turning what a handler did into a Completion: success, retry with backoff, dead, or the
outcome the handler asked for by raising ``Retry``, ``Cancel`` or ``Discard``."""

from __future__ import annotations

import json
import traceback
from typing import Any

from ledgerq.core.job import Claim, Job
from ledgerq.core.outcomes import Cancel, Discard, JobOutcome, Retry
from ledgerq.core.ports import Completion
from ledgerq.core.redaction import mask_text
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.states import JobState

MAX_TRACEBACK_CHARS = 8000


def succeeded(job: Job, result_json: str | None, ran_seconds: float | None = None) -> Completion:
    """The attempt finished without error (its body ran ``ran_seconds``)."""
    return Completion(
        claim=_claim(job),
        state=JobState.SUCCEEDED,
        result_json=result_json,
        batch_id=job.batch_id,
        workflow_id=job.workflow_id,
        ran_seconds=ran_seconds,
    )


def raised(
    job: Job, policy: RetryPolicy, exc: Exception, ran_seconds: float | None = None
) -> Completion:
    """The handler raised ``exc``: the outcome it asked for (``Retry``, ``Cancel``,
    ``Discard``), else a failure that retries unless the task's ``retry_on`` /
    ``dont_retry_on`` say this exception does not (then ``dead`` at once)."""
    if isinstance(exc, JobOutcome):
        return asked(job, policy, exc, ran_seconds)
    message = f"{type(exc).__name__}: {exc}"
    if not policy.retries(exc):
        error = _error(job, "exception", message, exc)
        error["retryable"] = False  # the task's retry_on / dont_retry_on ruled it out
        return _dead(job, json.dumps(error), ran_seconds)
    return failed(job, policy, "exception", exc, message, ran_seconds)


def asked(
    job: Job, policy: RetryPolicy, outcome: JobOutcome, ran_seconds: float | None = None
) -> Completion:
    """The outcome a handler asked for by raising ``outcome``; its ``kind`` and ``reason``
    are stored as the job's error."""
    reason = mask_text(outcome.reason)
    message = f"{outcome.kind}: {reason}" if reason else outcome.kind
    error = {"kind": outcome.kind, "message": message, "reason": reason, "attempt": job.runs}
    if isinstance(outcome, Retry):
        delay = outcome.delay if outcome.delay is not None else policy.delay_seconds(job.runs)
        if outcome.delay is not None:
            error["delay_seconds"] = outcome.delay
        return _failed_or_dead(job, json.dumps(error), delay, ran_seconds)
    if isinstance(outcome, Cancel):
        return _final(job, JobState.CANCELLED, json.dumps(error), ran_seconds)
    if isinstance(outcome, Discard):
        return _dead(job, json.dumps(error), ran_seconds)
    raise TypeError(f"unknown job outcome {type(outcome).__name__}")


def failed(
    job: Job,
    policy: RetryPolicy,
    kind: str,
    exc: BaseException | None,
    message: str,
    ran_seconds: float | None = None,
) -> Completion:
    """The attempt failed: retry after the policy's backoff, or ``dead`` when attempts are spent.

    ``kind`` is ``exception``, ``timeout`` or ``unknown_task`` and is stored with the error.
    Message and traceback are stored masked (``core.redaction``): whoever reads the ledger,
    an API token or a database dump, never sees a password the handler's exception carried.
    """
    error_json = json.dumps(_error(job, kind, message, exc))
    return _failed_or_dead(job, error_json, policy.delay_seconds(job.runs), ran_seconds)


def _error(job: Job, kind: str, message: str, exc: BaseException | None) -> dict[str, Any]:
    error: dict[str, Any] = {"kind": kind, "message": mask_text(message), "attempt": job.runs}
    if exc is not None:
        error["type"] = type(exc).__name__
        text = "".join(traceback.format_exception(exc))
        error["traceback"] = mask_text(text[-MAX_TRACEBACK_CHARS:])
    return error


def _failed_or_dead(
    job: Job, error_json: str, delay: float, ran_seconds: float | None
) -> Completion:
    """``failed`` (retried in ``delay`` s) while the job has attempts left, else ``dead``."""
    # The job's own max_attempts (set at enqueue) wins over the task's current default.
    if job.attempt < job.max_attempts:
        return Completion(
            _claim(job),
            JobState.FAILED,
            error_json=error_json,
            retry_delay_seconds=delay,
            ran_seconds=ran_seconds,
        )
    return _dead(job, error_json, ran_seconds)


def buried(job: Job, kind: str, message: str) -> Completion:
    """The job is ``dead`` now, whatever attempts it has left (e.g. no worker knows its task)."""
    return _dead(job, json.dumps({"kind": kind, "message": message, "attempt": job.runs}))


def _dead(job: Job, error_json: str, ran_seconds: float | None = None) -> Completion:
    return _final(job, JobState.DEAD, error_json, ran_seconds)


def _final(
    job: Job, state: JobState, error_json: str, ran_seconds: float | None = None
) -> Completion:
    return Completion(
        _claim(job),
        state,
        error_json=error_json,
        batch_id=job.batch_id,
        workflow_id=job.workflow_id,
        ran_seconds=ran_seconds,
    )


def _claim(job: Job) -> Claim:
    return Claim(job.id, job.attempt)
