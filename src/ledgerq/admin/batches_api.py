"""``/api/v1/batches``: create a batch (admin or producer token), see its progress and callbacks
and retry its failed members, through the same ``BatchClient`` as ``app.batch`` and ``ledgerq
batch`` (read token to look, admin to retry)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ledgerq.admin import producing, schemas
from ledgerq.admin.api import ERRORS, Admin, Deps, Producer, Reader, record_audit
from ledgerq.admin.bulk_api import MAX_BULK_JOBS, BulkProblem
from ledgerq.core import errors
from ledgerq.core.batches import BatchStatus
from ledgerq.core.job import MAX_DELAY_SECONDS

router = APIRouter(responses=ERRORS, tags=["batches"])

BatchId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The batch's id.")]


class BatchOut(BaseModel):
    """A batch of jobs: members per state and its callbacks (each fires at most once)."""

    id: int
    size: int = Field(description="Member jobs.")
    created_at: datetime
    finished: int = Field(description="Members that succeeded, died or were cancelled.")
    progress: float = Field(description="finished / size, from 0 to 1.")
    counts: dict[str, int] = Field(description="Members per job state.")
    callbacks: dict[str, str] = Field(description="Task per event (success, failure, complete).")
    fired_at: dict[str, datetime | None] = Field(
        description="Per event, when its callback was enqueued (None: not yet)."
    )


class BatchMember(BaseModel):
    """One job of a new batch (a batch member takes no dedupe key, hold or expiry)."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=200, description="Registered task name.")
    args: list[Any] = Field(default_factory=list, description="Positional arguments.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments.")
    queue: str | None = Field(default=None, pattern=schemas.QUEUE_PATTERN)
    priority: int | None = Field(default=None, ge=-32767, le=32767, description="Lower first.")
    delay: float = Field(default=0.0, ge=0, le=MAX_DELAY_SECONDS, description="Seconds.")
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400, description="Seconds.")


class BatchIn(BaseModel):
    """A batch to create: its jobs and the callbacks (task names, each called with
    ``batch_id`` only) to run once every member finished."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[BatchMember] = Field(
        min_length=1,
        max_length=MAX_BULK_JOBS,
        description=f"1 to {MAX_BULK_JOBS} member jobs.",
    )
    on_success: str | None = Field(default=None, min_length=1, max_length=200)
    on_failure: str | None = Field(default=None, min_length=1, max_length=200)
    on_complete: str | None = Field(default=None, min_length=1, max_length=200)


class BatchCreated(BaseModel):
    """The stored batch and its members' job ids, in the request's order."""

    id: int
    job_ids: list[int]


class BatchRetryOut(BaseModel):
    """The members queued again."""

    batch_id: int
    retried: list[int] = Field(description="Ids of the dead and failed members now queued.")


class BatchList(BaseModel):
    """The newest batches first."""

    batches: list[BatchOut]


def _document(status: BatchStatus) -> dict[str, Any]:
    document = status.as_dict()
    document["progress"] = round(status.finished / status.size, 4) if status.size else 1.0
    return document


@router.post(
    "/api/v1/batches",
    status_code=201,
    response_model=BatchCreated,
    responses={400: {"model": BulkProblem, "description": "Bad members; nothing was stored"}},
)
def create_batch(body: BatchIn, request: Request, caller: Producer, deps: Deps) -> Any:
    """Store a batch and its jobs in one transaction (admin or producer token); 400 naming
    every bad member, and nothing stored, if any is bad."""
    batch = deps.batches.new(
        on_success=body.on_success, on_failure=body.on_failure, on_complete=body.on_complete
    )
    problems: list[dict[str, Any]] = []
    for index, member in enumerate(body.jobs):
        try:
            job = deps.client.build(
                member.task,
                member.args,
                member.kwargs,
                queue=member.queue,
                priority=member.priority,
                delay=member.delay,
                max_attempts=member.max_attempts,
                timeout=member.timeout,
            )
        except (errors.InvalidJob, errors.TaskNotRegistered) as exc:
            problems.append({"index": index, "detail": str(exc)})
            continue
        batch.add_job(producing.stamp(job, caller))
    if problems:
        detail = f"{len(problems)} of {len(body.jobs)} jobs refused; nothing was stored"
        return JSONResponse({"detail": detail, "errors": problems}, status_code=400)
    batch_id = batch.enqueue()
    record_audit(request, caller, "batch-create", batch_id=batch_id, jobs=len(batch.job_ids))
    return {"id": batch_id, "job_ids": batch.job_ids}


@router.get("/api/v1/batches", response_model=BatchList)
def list_batches(
    _caller: Reader, deps: Deps, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> dict[str, Any]:
    """The newest batches with their progress and members per state."""
    return {"batches": [_document(s) for s in deps.batches.list(limit=limit)]}


@router.get("/api/v1/batches/{batch_id}", response_model=BatchOut)
def get_batch(batch_id: BatchId, _caller: Reader, deps: Deps) -> dict[str, Any]:
    """The batch's progress, members per state and which callbacks fired."""
    return _document(deps.batches.get(batch_id))


@router.post("/api/v1/batches/{batch_id}/retry-failed", response_model=BatchRetryOut)
def retry_failed(batch_id: BatchId, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Queue the batch's dead and failed members again now (only those; none is fine)."""
    job_ids = deps.batches.retry_failed(batch_id)
    record_audit(request, caller, "batch-retry-failed", batch_id=batch_id, jobs=len(job_ids))
    return {"batch_id": batch_id, "retried": job_ids}
