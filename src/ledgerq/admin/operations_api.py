"""``POST /admin/queue/requeue-failed`` (admin: run dead jobs again in bulk, fenced, as
``ledgerq queue requeue-failed``) and ``GET /admin/failover-events`` (read: the failover
record, as ``ledgerq worker failovers``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ledgerq.admin import schemas
from ledgerq.admin.api import ERRORS, Admin, Deps, Reader, record_audit
from ledgerq.core.requeue import DeadJobFilter, parse_since

router = APIRouter(responses=ERRORS)


class RequeueFailedRequest(BaseModel):
    """Which dead jobs to run again; every given field must match (none: every dead job)."""

    model_config = ConfigDict(extra="forbid")

    queue: str | None = Field(default=None, pattern=schemas.QUEUE_PATTERN)
    task: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=schemas.KEY_PATTERN
    )
    since: str | None = Field(
        default=None,
        max_length=64,
        description="Only jobs that died since: a duration back from now (90s, 15m, 2h, 7d,"
        " 1w) or an ISO-8601 time (naive: UTC).",
    )
    dry_run: bool = Field(default=False, description="Count the matches; move nothing.")


class RequeueCount(BaseModel):
    """Dead jobs of one queue and task moved (or matched)."""

    queue: str
    task: str
    jobs: int


class RequeueFailedOut(BaseModel):
    """What the bulk retry did (``dry_run``: would do)."""

    dry_run: bool
    total: int
    counts: list[RequeueCount]


@router.post("/admin/queue/requeue-failed", response_model=RequeueFailedOut, tags=["queues"])
def requeue_failed(
    body: RequeueFailedRequest, request: Request, caller: Admin, deps: Deps
) -> dict[str, Any]:
    """Queue again, due now, the dead jobs the body selects, as the single retry does each
    (one more run). Fenced: only jobs still dead when the update reaches them move."""
    try:
        since = parse_since(body.since) if body.since is not None else None
    except ValueError as exc:
        raise HTTPException(400, str(exc).replace("--since", "since")) from None
    which = DeadJobFilter(queue=body.queue, task=body.task, died_since=since)
    report = deps.client.retry_dead(which, dry_run=body.dry_run)
    if not body.dry_run:
        record_audit(
            request,
            caller,
            "requeue_failed",
            queue=body.queue,
            task=body.task,
            since=body.since,
            jobs=report.total,
        )
    return report.as_dict()


class FailoverEventOut(BaseModel):
    """One failover: the dead worker, who noticed, the jobs moved and the time it took."""

    id: int
    worker_id: str = Field(description="The worker that was failed over.")
    detected_by: str
    last_heartbeat_at: datetime | None
    detected_at: datetime
    jobs_requeued: int
    jobs_dead: int = Field(description="Jobs buried: their attempts were spent.")
    job_ids: dict[str, list[int]] = Field(
        description="The jobs moved: ``requeued`` (back to the queue) and ``dead`` (buried)."
    )
    duration_ms: float = Field(description="Time the failover took.")


class FailoverEventsOut(BaseModel):
    """The newest failover events first."""

    events: list[FailoverEventOut]


@router.get("/admin/failover-events", response_model=FailoverEventsOut, tags=["queues"])
def get_failover_events(
    _caller: Reader,
    deps: Deps,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    worker_id: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
) -> dict[str, Any]:
    """The failover record, newest first (kept for RETENTION_FAILOVER_EVENTS); with
    ``worker_id``, that worker's events alone."""
    if deps.failovers is None:
        raise HTTPException(404, "failover events are not available on this server")
    return {"events": deps.failovers.list_failover_events(limit=limit, worker_id=worker_id)}
