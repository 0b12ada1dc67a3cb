"""The JSON API: jobs (``/api/v1``) and queue administration (``/admin``). Every change is
written to the audit log with the caller's role, never its token."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response

from ledgerq.admin import producing, schemas
from ledgerq.admin.auth import Caller, admin_access, enqueue_access, job_access, read_access
from ledgerq.admin.deps import AdminDeps, job_document
from ledgerq.core import errors, lifetime
from ledgerq.core.operations import MAX_HISTORY_MINUTES, IdempotentRequest, WorkerView
from ledgerq.core.states import FINISHED, JobState

audit = structlog.get_logger("ledgerq.audit")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.Problem} for code in (400, 401, 403, 404, 409, 503)
}
JobId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The job's id.")]
QueueName = Annotated[str, Path(pattern=schemas.QUEUE_PATTERN)]
Reader = Annotated[Caller, Depends(read_access)]
Admin = Annotated[Caller, Depends(admin_access)]
Producer = Annotated[Caller, Depends(enqueue_access)]
JobReader = Annotated[Caller, Depends(job_access)]
IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=schemas.KEY_PATTERN),
]

router = APIRouter(responses=ERRORS)


def deps_of(request: Request) -> AdminDeps:
    """The AdminDeps of the running application."""
    deps: AdminDeps = request.app.state.deps
    return deps


Deps = Annotated[AdminDeps, Depends(deps_of)]


def record_audit(request: Request, caller: Caller, action: str, **fields: Any) -> None:
    """Log a change with the caller's role and address (never its token)."""
    client = request.client.host if request.client else "-"
    audit.info("audit", action=action, caller=caller.label, client=client, **fields)


@router.post(
    "/api/v1/jobs",
    status_code=201,
    response_model=schemas.EnqueueResponse,
    tags=["jobs"],
    responses={200: {"model": schemas.EnqueueResponse, "description": "Replay or duplicate"}},
)
def enqueue_job(
    body: schemas.EnqueueRequest,
    request: Request,
    response: Response,
    caller: Producer,
    deps: Deps,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Create a job (admin or producer token). With ``Idempotency-Key`` a repeated request
    returns the first job (200); the same key with a different body, or from another caller,
    is refused (409)."""
    try:
        text = body.model_dump_json()
    except ValueError:  # a lone surrogate in the arguments: no JSON text can hold it
        raise errors.PayloadError(
            "job arguments must be valid Unicode text (they hold a lone surrogate)"
        ) from None
    digest = producing.request_hash(caller, text)
    if idempotency_key is not None:
        seen = deps.idempotency.find_request(idempotency_key)
        if seen is not None:
            return _replay(deps, caller, seen, digest, response)
    job = producing.build_job(deps.client, body, caller, key=idempotency_key)
    result = deps.client.enqueue([job])[0]
    if idempotency_key is not None:
        held = deps.idempotency.remember_request(
            IdempotentRequest(idempotency_key, result.job_id, digest)
        )
        if held.job_id != result.job_id:
            return _replay(deps, caller, held, digest, response)
    if result.duplicate:
        response.status_code = 200
    record_audit(request, caller, "enqueue", job_id=result.job_id, task=body.task, queue=job.queue)
    return {
        "id": result.job_id,
        "duplicate": result.duplicate,
        "replayed": False,
        "job": _document_for(deps, caller, result.job_id),
    }


def _document_for(deps: AdminDeps, caller: Caller, job_id: int) -> dict[str, Any] | None:
    """The job's document if ``caller`` may read it, else None."""
    job = deps.client.get(job_id)
    return job_document(job) if producing.may_read(caller, job) else None


def _replay(
    deps: AdminDeps, caller: Caller, seen: IdempotentRequest, digest: str, response: Response
) -> dict[str, Any]:
    if seen.request_hash != digest:
        raise HTTPException(409, "Idempotency-Key was used with a different request")
    response.status_code = 200
    doc = _document_for(deps, caller, seen.job_id)
    return {"id": seen.job_id, "duplicate": False, "replayed": True, "job": doc}


@router.get("/api/v1/jobs", response_model=schemas.JobList, tags=["jobs"])
def list_jobs(
    _caller: Reader,
    deps: Deps,
    state: JobState | None = None,
    queue: Annotated[str | None, Query(pattern=schemas.QUEUE_PATTERN)] = None,
    task: Annotated[
        str | None, Query(min_length=1, max_length=200, pattern=schemas.KEY_PATTERN)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest jobs first, filtered by state, queue and task."""
    jobs = deps.reads.client.list(state=state, queue=queue, task=task, limit=limit)
    return {"jobs": [job_document(j) for j in jobs]}


@router.get("/api/v1/jobs/{job_id}", response_model=schemas.JobOut, tags=["jobs"])
def get_job(job_id: JobId, caller: JobReader, deps: Deps) -> dict[str, Any]:
    """One job with its arguments (secrets masked), error and traceback, and the progress of
    its batch items (``items``, null for a job without items). A producer token reads only
    the jobs it enqueued (404 for any other)."""
    document = job_document(producing.readable(deps.client, caller, job_id))
    if deps.items is not None:
        progress = deps.items.item_progress(job_id)
        if progress.total is not None or progress.done > 0:
            document["items"] = progress.as_dict()
    return document


@router.post("/api/v1/jobs/{job_id}/cancel", response_model=schemas.JobOut, tags=["jobs"])
def cancel_job(job_id: JobId, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Cancel an unfinished job (409 if it has finished)."""
    job = deps.client.cancel(job_id)
    record_audit(request, caller, "cancel", job_id=job_id, state=job.state.value)
    return job_document(job)


@router.post("/api/v1/jobs/{job_id}/retry", response_model=schemas.JobOut, tags=["jobs"])
def retry_job(job_id: JobId, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Queue a failed, dead or cancelled job again now (409 otherwise)."""
    job = deps.client.retry(job_id)
    record_audit(request, caller, "retry", job_id=job_id, state=job.state.value)
    return job_document(job)


@router.post("/api/v1/jobs/{job_id}/start", response_model=schemas.JobOut, tags=["jobs"])
def start_job(job_id: JobId, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Start a held job: it is queued now (409 if it is not held)."""
    job = deps.client.start(job_id)
    record_audit(request, caller, "start", job_id=job_id, state=job.state.value)
    return job_document(job)


@router.post("/admin/queues/{queue}/pause", response_model=schemas.QueueControlOut, tags=["queues"])
def pause_queue(queue: QueueName, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Stop workers from claiming jobs of ``queue``; enqueues still succeed."""
    deps.controls.pause_queue(queue)
    record_audit(request, caller, "pause", queue=queue)
    return {"queue": queue, "paused": True}


@router.post(
    "/admin/queues/{queue}/resume", response_model=schemas.QueueControlOut, tags=["queues"]
)
def resume_queue(queue: QueueName, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Let workers claim jobs of ``queue`` again."""
    deps.controls.resume_queue(queue)
    record_audit(request, caller, "resume", queue=queue)
    return {"queue": queue, "paused": False}


def queue_stats(deps: AdminDeps) -> dict[str, Any]:
    """Per queue: jobs per state, paused flag, latency, lifetime figures; and totals per
    state and over the lifetime."""
    reads = deps.reads  # the read replica when one is configured
    counts = reads.client.store.count_jobs()
    waiting = reads.client.store.count_waiting_to_start()
    paused = reads.controls.paused_queues()
    latency = reads.controls.queue_latency_seconds()
    since_start = deps.lifetime.get()  # at most lifetime_ttl_seconds old
    lifetimes = lifetime.documents(since_start)
    # A queue whose every job the retention deleted still shows its lifetime figures.
    per_queue: dict[str, dict[str, int]] = {name: {} for name in [*paused, *lifetimes]}
    totals: dict[str, int] = {s.value: 0 for s in JobState}
    for (queue, state), n in counts.items():
        per_queue.setdefault(queue, {})[state.value] = n
        totals[state.value] += n
    queues = [
        {
            "name": name,
            "counts": per_queue[name],
            "queued": per_queue[name].get(JobState.QUEUED.value, 0),
            "running": per_queue[name].get(JobState.RUNNING.value, 0) - waiting.get(name, 0),
            "claimed": waiting.get(name, 0),
            "paused": name in paused,
            "latency_seconds": round(latency.get(name, 0.0), 3),
            "lifetime": lifetimes.get(name),
        }
        for name in sorted(per_queue)
    ]
    overall = lifetime.LifetimeTotal("*", "*")
    for total in since_start:
        overall = overall.plus(total, queue="*", task="*")
    return {"queues": queues, "totals": totals, "lifetime": overall.figures()}


@router.get("/admin/queue/stats", response_model=schemas.StatsOut, tags=["queues"])
def get_queue_stats(_caller: Reader, deps: Deps) -> dict[str, Any]:
    """Jobs per queue and state, paused queues, latency."""
    return queue_stats(deps)


def worker_documents(views: Sequence[WorkerView]) -> list[dict[str, Any]]:
    """Workers with the age of their last heartbeat."""
    now = datetime.now(UTC)
    return [
        {
            "worker_id": v.worker_id,
            "status": v.status,
            "running_jobs": v.running_jobs,
            "queues": list(v.queues),
            "last_heartbeat_at": v.last_heartbeat_at,
            "hostname": v.hostname,
            "stopped_at": v.stopped_at,
            "heartbeat_age_seconds": (
                round((now - v.last_heartbeat_at).total_seconds(), 3)
                if v.last_heartbeat_at
                else None
            ),
        }
        for v in views
    ]


@router.get("/admin/queue/workers", response_model=schemas.WorkersOut, tags=["queues"])
def get_workers(_caller: Reader, deps: Deps, include_inactive: bool = False) -> dict[str, Any]:
    """Active workers of the registry (``source``: ``registry``); with ``include_inactive``
    the stopped and dead ones it still records follow them."""
    views = deps.reads.fleet.list_workers(include_inactive=include_inactive)
    source = views[0].source if views else "jobs"
    return {"source": source, "workers": worker_documents(views)}


@router.get("/admin/metrics", response_model=schemas.MetricsOut, tags=["queues"])
def get_metrics_snapshot(_caller: Reader, deps: Deps) -> dict[str, Any]:
    """Totals per state, finished jobs, queue lengths and active workers, as JSON."""
    stats = queue_stats(deps)
    totals: dict[str, int] = stats["totals"]
    return {
        "at": time.time(),
        "totals": totals,
        "finished_total": sum(totals[s.value] for s in FINISHED),
        "queue_lengths": {q["name"]: q["queued"] for q in stats["queues"]},
        "workers_active": len(deps.reads.fleet.list_workers()),
    }


@router.get("/admin/metrics/history", response_model=schemas.HistoryOut, tags=["queues"])
def get_history(
    _caller: Reader,
    deps: Deps,
    minutes: Annotated[int, Query(ge=1, le=MAX_HISTORY_MINUTES)] = 60,
) -> dict[str, Any]:
    """Jobs finished per minute (succeeded, dead, cancelled) over the last ``minutes``, read
    from the ledger's ``finished_at``: the dashboard's charts start from it."""
    history = deps.reads.controls.finished_per_minute(minutes=minutes)
    return {"minutes": [asdict(m) for m in history]}
