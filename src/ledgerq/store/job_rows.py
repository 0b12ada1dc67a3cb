"""The row of a new job, spelled once: every insert of a job (an enqueue, a batch's callback, a
workflow's ready step, PostgreSQL's one-statement bulk insert) builds it here from a
``NewJob``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledgerq.core.bulk import JobBatch
from ledgerq.core.job import NewJob, as_utc

if TYPE_CHECKING:  # dialects imports the PostgreSQL statements, which use the columns below
    from ledgerq.store.dialects import Dialect

#: The columns of every new job's row, in order; a plain job (no dedupe key, deadline or
#: explicit time) has nothing else but its times, which the database's clock sets.
PLAIN_COLUMNS = ("queue", "task", "args", "priority", "state", "max_attempts", "timeout_seconds")


def job_row(d: Dialect, job: NewJob, workflow_id: str | None = None) -> dict[str, Any]:
    """``job``'s row without its times (a bulk insert sets them from ``delay_s``); a
    workflow's step names its workflow."""
    row = {
        "queue": job.queue,
        "task": job.task,
        "args": job.args_json,
        "priority": job.priority,
        "state": job.initial_state.value,
        "max_attempts": job.max_attempts,
        "timeout_seconds": job.timeout_seconds,
        "dedupe_key": job.dedupe_key,
        "expires_at": None if job.expires_at is None else d.bind_time(as_utc(job.expires_at)),
    }
    if workflow_id is not None:
        row["workflow_id"] = workflow_id
    return row


def bulk_rows(d: Dialect, new_jobs: Sequence[NewJob]) -> list[dict[str, Any]]:
    """Rows of a bulk insert: each job's row with its ``delay_s``, from which the statement
    sets ``run_at``."""
    if isinstance(new_jobs, JobBatch):  # one row built, copied with each job's arguments
        shared = {**job_row(d, new_jobs.template), "delay_s": new_jobs.template.delay_seconds}
        return [{**shared, "args": args} for args in new_jobs.args_json]
    return [{**job_row(d, job), "delay_s": job.delay_seconds} for job in new_jobs]


def job_values(d: Dialect, job: NewJob, workflow_id: str | None = None) -> dict[str, Any]:
    """``job``'s values for a single-row insert: times are SQL expressions of the database
    clock (or its explicit ``run_at``)."""
    row = job_row(d, job, workflow_id)
    row["created_at"] = d.now()
    if job.run_at is not None:
        row["run_at"] = d.bind_time(as_utc(job.run_at))
    else:
        row["run_at"] = d.now_plus(sa.literal(job.delay_seconds, sa.Float))
    return row
