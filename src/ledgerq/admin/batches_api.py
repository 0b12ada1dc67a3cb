"""``/api/v1/batches/{id}``: a batch's progress and callbacks, and retrying its failed members,
through the same ``BatchClient`` as ``ledgerq batch`` (read token to look, admin to retry)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from ledgerq.admin.api import ERRORS, Admin, Deps, Reader, record_audit
from ledgerq.core.batches import BatchStatus

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
