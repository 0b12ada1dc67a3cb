"""Turning what a handler did into a Completion: success, retry with backoff, or dead."""

from __future__ import annotations

import json
import traceback
from typing import Any

from ledgerq.core.job import Claim, Job
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
    error: dict[str, Any] = {"kind": kind, "message": mask_text(message), "attempt": job.attempt}
    if exc is not None:
        error["type"] = type(exc).__name__
        text = "".join(traceback.format_exception(exc))
        error["traceback"] = mask_text(text[-MAX_TRACEBACK_CHARS:])
    error_json = json.dumps(error)
    # The job's own max_attempts (set at enqueue) wins over the task's current default.
    if job.attempt < job.max_attempts:
        delay = policy.delay_seconds(job.attempt)
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
    return _dead(job, json.dumps({"kind": kind, "message": message, "attempt": job.attempt}))


def _dead(job: Job, error_json: str, ran_seconds: float | None = None) -> Completion:
    return Completion(
        _claim(job),
        JobState.DEAD,
        error_json=error_json,
        batch_id=job.batch_id,
        workflow_id=job.workflow_id,
        ran_seconds=ran_seconds,
    )


def _claim(job: Job) -> Claim:
    return Claim(job.id, job.attempt)
