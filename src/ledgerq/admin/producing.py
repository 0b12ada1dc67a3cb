"""What every enqueue over HTTP shares: turning a request item into a validated ``NewJob``
stamped with the producer that asked, the rule of which jobs a caller may read, and the hash
that ties an ``Idempotency-Key`` to one request of one caller."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime

from ledgerq.admin.auth import Caller, Role
from ledgerq.admin.schemas import EnqueueRequest
from ledgerq.core import errors
from ledgerq.core.job import Job, NewJob, as_utc, check_run_at
from ledgerq.core.producers import producer_of, with_producer
from ledgerq.producer.client import Client


def build_job(client: Client, body: EnqueueRequest, caller: Caller, *, key: str | None) -> NewJob:
    """The validated job of ``body`` (``InvalidJob``/``TaskNotRegistered`` otherwise),
    recording the producer for a producer token. ``key``, an ``Idempotency-Key``, becomes the
    job's dedupe key when it has none, so two concurrent first requests make one job."""
    job = client.build(
        body.task,
        body.args,
        body.kwargs,
        queue=body.queue,
        priority=body.priority,
        delay=body.delay,
        run_at=check_run_at(body.run_at),
        dedupe_key=body.dedupe_key or (f"idem:{key}" if key else None),
        dedupe_for=body.dedupe_for,
        max_attempts=body.max_attempts,
        timeout=body.timeout,
        held=body.held,
        expires_at=check_expiry(body.expires_at),
    )
    return stamp(job, caller)


#: The moments ``expires_at`` may name: every database stores them (MariaDB's DATETIME ends
#: with year 9999, and a year-1 time in a zone east of UTC has no UTC form at all).
EXPIRY_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))


def check_expiry(expires_at: datetime | None) -> datetime | None:
    """``expires_at`` in UTC; ``InvalidSchedule`` for a time without a zone or outside
    ``EXPIRY_RANGE``. A time already past is taken: the job is deleted unstarted at the
    reconciler's next sweep."""
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        raise errors.InvalidSchedule("expires_at needs a time zone (e.g. 2030-01-01T00:00:00Z)")
    try:
        moment = as_utc(expires_at)
    except OverflowError:
        moment = None
    if moment is None or not EXPIRY_RANGE[0] <= moment < EXPIRY_RANGE[1]:
        raise errors.InvalidSchedule("expires_at must lie between the years 1970 and 9000")
    return moment


def stamp(job: NewJob, caller: Caller) -> NewJob:
    """``job`` recording ``caller``'s producer name when the caller is a producer."""
    if caller.role is not Role.PRODUCER:
        return job
    return dataclasses.replace(job, args_json=with_producer(job.args_json, caller.producer))


def may_read(caller: Caller, job: Job) -> bool:
    """Whether ``caller`` may see ``job``: every job for the read and admin roles, only the
    jobs it enqueued for a producer."""
    return caller.role is not Role.PRODUCER or producer_of(job.args_json) == caller.producer


def readable(client: Client, caller: Caller, job_id: int) -> Job:
    """The job if ``caller`` may read it; ``JobNotFound`` otherwise, so a producer learns
    nothing about jobs that are not its own, not even that they exist."""
    job = client.get(job_id)
    if not may_read(caller, job):
        raise errors.JobNotFound(job_id)
    return job


def request_hash(caller: Caller, text: str) -> str:
    """The hash an Idempotency-Key record keeps: of the request body and of who sent it, so
    another caller reusing a key is refused (409) rather than shown someone else's jobs."""
    # The admin's hash is of the body alone, as before producers existed (its records stay).
    who = "" if caller.role is Role.ADMIN else f"{caller.role.value}:{caller.producer}\n"
    try:
        data = (who + text).encode()
    except UnicodeEncodeError:  # a lone surrogate in the arguments: no JSON text can hold it
        raise errors.PayloadError(
            "job arguments must be valid Unicode text (they hold a lone surrogate)"
        ) from None
    return hashlib.sha256(data).hexdigest()
