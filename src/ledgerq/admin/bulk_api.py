"""``POST /api/v1/jobs/bulk``: many jobs in one request and one transaction, all or nothing.

Every item is validated first; if any is bad the answer is 400 listing every bad item and
nothing is stored. With ``Idempotency-Key`` the jobs and one key record per item
(``idempotency_keys``: ``<key>#<index>``) commit in the same transaction, so a replay (or a
concurrent twin of the request) answers the first request's ids without creating jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ledgerq.admin import producing, schemas
from ledgerq.admin.api import ERRORS, Deps, IdempotencyKey, Producer, record_audit
from ledgerq.admin.auth import Caller
from ledgerq.admin.deps import AdminDeps
from ledgerq.core import errors
from ledgerq.core.job import EnqueueResult, NewJob
from ledgerq.core.operations import IdempotentRequest
from ledgerq.core.producers import KeyTaken, RequestLedger

#: Most jobs one bulk request may carry (more: 413).
MAX_BULK_JOBS = 1000
#: Marks the key records of bulk requests; a control character, which no HTTP header (and
#: so no single enqueue's Idempotency-Key) can carry, keeps the two apart.
BULK_KEY_PREFIX = "\x1fbulk:"

router = APIRouter(responses=ERRORS, tags=["jobs"])


class BulkEnqueueRequest(BaseModel):
    """The jobs to create, each as ``POST /api/v1/jobs`` takes one."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[schemas.EnqueueRequest] = Field(
        min_length=1,
        description=f"1 to {MAX_BULK_JOBS} jobs (more: 413).",
        json_schema_extra={"maxItems": MAX_BULK_JOBS},
    )


class BulkItemOut(BaseModel):
    """What became of one item: the id of its job."""

    index: int = Field(description="The item's position in the request, from 0.")
    id: int = Field(description="The job's id.")
    duplicate: bool = Field(
        description="A job held the item's dedupe_key already; id is that job's."
    )


class BulkEnqueueResponse(BaseModel):
    """One result per item, in the request's order."""

    jobs: list[BulkItemOut]
    replayed: bool = Field(description="The Idempotency-Key was seen before: no job was made.")


class ItemProblem(BaseModel):
    """Why one item was refused."""

    index: int = Field(description="The item's position in the request, from 0.")
    detail: str


class BulkProblem(BaseModel):
    """A refused request: every bad item (empty when the request as a whole was refused,
    e.g. a batch callback that takes other arguments); nothing was stored."""

    detail: str
    errors: list[ItemProblem] = Field(default_factory=list)


@router.post(
    "/api/v1/jobs/bulk",
    status_code=201,
    response_model=BulkEnqueueResponse,
    responses={
        200: {"model": BulkEnqueueResponse, "description": "Replay of an Idempotency-Key"},
        400: {"model": BulkProblem, "description": "Bad items; nothing was stored"},
        413: {"model": schemas.Problem, "description": "Too many jobs or bytes"},
    },
)
def enqueue_bulk(
    body: BulkEnqueueRequest,
    request: Request,
    response: Response,
    caller: Producer,
    deps: Deps,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Create many jobs in one transaction (admin or producer token): all of them, or none
    and a 400 naming every bad item. With ``Idempotency-Key`` a repeated request answers the
    first one's ids (200, ``replayed``) and creates nothing; the same key with another body,
    or from another caller, is refused (409)."""
    if len(body.jobs) > MAX_BULK_JOBS:
        raise HTTPException(
            413, f"a bulk request carries at most {MAX_BULK_JOBS} jobs, got {len(body.jobs)}"
        )
    keys: list[str] = []
    digest = ""
    if idempotency_key is not None:
        keys = [f"{BULK_KEY_PREFIX}{idempotency_key}#{i}" for i in range(len(body.jobs))]
        digest = producing.request_hash(caller, body.model_dump_json())
        if _requests(deps).find_requests(keys[:1])[0] is not None:
            return _replay(deps, keys, digest, response)
    built, problems = _build_all(deps, body.jobs, caller)
    if problems:
        return _refusal(problems, len(body.jobs))
    try:
        results = _store(deps, built, keys, digest)
    except KeyTaken:
        return _replay(deps, keys, digest, response)
    record_audit(request, caller, "enqueue-bulk", jobs=len(results), first_id=results[0].job_id)
    return {"jobs": _items(results), "replayed": False}


def _requests(deps: AdminDeps) -> RequestLedger:
    if deps.requests is None:
        raise HTTPException(400, "this server keeps no Idempotency-Key records for bulk requests")
    return deps.requests


def _build_all(
    deps: AdminDeps, items: Sequence[schemas.EnqueueRequest], caller: Caller
) -> tuple[list[NewJob], list[dict[str, Any]]]:
    built: list[NewJob] = []
    problems: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        try:
            built.append(producing.build_job(deps.client, item, caller, key=None))
        except (errors.InvalidJob, errors.TaskNotRegistered) as exc:
            problems.append({"index": index, "detail": str(exc)})
    return built, problems


def _refusal(problems: list[dict[str, Any]], total: int) -> JSONResponse:
    detail = f"{len(problems)} of {total} jobs refused; nothing was stored"
    return JSONResponse({"detail": detail, "errors": problems}, status_code=400)


def _store(
    deps: AdminDeps, jobs: list[NewJob], keys: list[str], digest: str
) -> Sequence[EnqueueResult]:
    """Insert the jobs (and the key records, with a key) in one transaction."""
    if not keys:
        return deps.client.enqueue(jobs)
    ledger = _requests(deps)
    with ledger.transaction() as tx:
        results = deps.client.enqueue(jobs, tx=tx)
        records = [
            IdempotentRequest(key, result.job_id, digest)
            for key, result in zip(keys, results, strict=True)
        ]
        ledger.remember_requests(records, connection=tx)
    return results


def _replay(deps: AdminDeps, keys: list[str], digest: str, response: Response) -> Any:
    found = _requests(deps).find_requests(keys)
    first = found[0]
    if first is not None and first.request_hash != digest:
        raise HTTPException(409, "Idempotency-Key was used with a different request")
    if any(record is None for record in found):
        raise HTTPException(
            409, "Idempotency-Key: some of its jobs were deleted since; use a new key"
        )
    response.status_code = 200
    results = [EnqueueResult(record.job_id) for record in found if record is not None]
    return {"jobs": _items(results), "replayed": True}


def _items(results: Sequence[EnqueueResult]) -> list[dict[str, Any]]:
    return [{"index": i, "id": r.job_id, "duplicate": r.duplicate} for i, r in enumerate(results)]
