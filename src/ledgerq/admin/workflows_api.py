"""``/api/v1/workflows``: create (admin or producer token), list, show, cancel and retry
workflows (DAGs of steps) through the same ``Workflow`` and ``Workflows`` as ``app.workflow``
and ``ledgerq workflow`` (read token to look, admin token to change)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ledgerq.admin import schemas
from ledgerq.admin.api import ERRORS, Admin, Deps, Producer, Reader, record_audit
from ledgerq.admin.auth import Caller, Role
from ledgerq.admin.bulk_api import MAX_BULK_JOBS, BulkProblem
from ledgerq.admin.deps import AdminDeps
from ledgerq.core import errors
from ledgerq.core.workflow import FailurePolicy, StepCall, WorkflowState
from ledgerq.producer.workflow_api import StepRef, Workflow

router = APIRouter(responses=ERRORS, tags=["workflows"])

WorkflowId = Annotated[
    str,
    Path(min_length=1, max_length=64, pattern=schemas.KEY_PATTERN, description="Workflow id."),
]


class StepOut(BaseModel):
    """One step: ``waiting`` until its dependencies succeeded, then its job's outcome."""

    name: str
    task: str
    depends_on: list[str] = Field(description="Steps that must succeed first.")
    state: str = Field(description="waiting, queued, succeeded, failed or cancelled.")
    job_id: int | None = Field(description="None while waiting.")
    job_state: str | None
    started_at: datetime | None
    finished_at: datetime | None


class WorkflowOut(BaseModel):
    """A workflow; ``steps`` is filled by the single-workflow endpoints, empty in lists."""

    id: str
    name: str
    state: str = Field(description="running, succeeded, failed or cancelled.")
    on_failure: str = Field(description="stop or continue.")
    created_at: datetime
    last_progress_at: datetime
    finished_at: datetime | None
    steps_total: int
    steps_done: int
    steps: list[StepOut]


class StepIn(BaseModel):
    """One step of a new workflow: a task call that runs once every step named in ``after``
    (listed before it) succeeded; it then receives their results as ``upstream``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=60, pattern=schemas.KEY_PATTERN, description="Unique step name."
    )
    task: str = Field(min_length=1, max_length=200, description="Registered task name.")
    args: list[Any] = Field(default_factory=list, description="Positional arguments.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments.")
    after: list[str] = Field(default_factory=list, description="Steps that must succeed first.")
    queue: str | None = Field(default=None, pattern=schemas.QUEUE_PATTERN)
    priority: int | None = Field(default=None, ge=-32767, le=32767, description="Lower first.")
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400, description="Seconds.")


class WorkflowIn(BaseModel):
    """A workflow to create: a name, what a failed step does, and its steps."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=schemas.KEY_PATTERN)
    on_failure: FailurePolicy = Field(
        default=FailurePolicy.STOP,
        description="stop: a failed step cancels every step not started; continue: only its"
        " dependents.",
    )
    steps: list[StepIn] = Field(min_length=1, max_length=MAX_BULK_JOBS)


class WorkflowList(BaseModel):
    """Newest workflows first."""

    workflows: list[WorkflowOut]


@router.post(
    "/api/v1/workflows",
    status_code=201,
    response_model=WorkflowOut,
    responses={400: {"model": BulkProblem, "description": "Bad steps; nothing was stored"}},
)
def create_workflow(body: WorkflowIn, request: Request, caller: Producer, deps: Deps) -> Any:
    """Store a workflow and queue its steps without dependencies (admin or producer token);
    400 naming every bad step, and nothing stored, if any is bad."""
    flow, problems = _build_workflow(body, caller, deps)
    if problems:
        detail = f"{len(problems)} of {len(body.steps)} steps refused; nothing was stored"
        return JSONResponse({"detail": detail, "errors": problems}, status_code=400)
    workflow_id = flow.enqueue()
    record_audit(request, caller, "workflow-create", workflow_id=workflow_id, name=body.name)
    return deps.workflows.get(workflow_id).as_dict()


def _build_workflow(
    body: WorkflowIn, caller: Caller, deps: AdminDeps
) -> tuple[Workflow, list[dict[str, Any]]]:
    producer = caller.producer if caller.role is Role.PRODUCER else None
    flow = Workflow(deps.client, deps.workflows.store, body.name, body.on_failure)
    flow.producer = producer
    problems: list[dict[str, Any]] = []
    for index, step in enumerate(body.steps):
        try:
            flow.step(
                StepCall(step.task, tuple(step.args), step.kwargs),
                after=[StepRef(name) for name in step.after],
                name=step.name,
                queue=step.queue,
                priority=step.priority,
                max_attempts=step.max_attempts,
                timeout=step.timeout,
            )
        except (errors.InvalidJob, errors.TaskNotRegistered) as exc:
            problems.append({"index": index, "detail": str(exc)})
    return flow, problems


@router.get("/api/v1/workflows", response_model=WorkflowList)
def list_workflows(
    _caller: Reader,
    deps: Deps,
    state: WorkflowState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """The newest workflows, optionally only those in ``state``."""
    views = deps.workflows.list(state=state, limit=limit)
    return {"workflows": [view.as_dict() for view in views]}


@router.get("/api/v1/workflows/{workflow_id}", response_model=WorkflowOut)
def get_workflow(workflow_id: WorkflowId, _caller: Reader, deps: Deps) -> dict[str, Any]:
    """The workflow with every step: state, job id and dependencies."""
    return deps.workflows.get(workflow_id).as_dict()


@router.post("/api/v1/workflows/{workflow_id}/cancel", response_model=WorkflowOut)
def cancel_workflow(
    workflow_id: WorkflowId, request: Request, caller: Admin, deps: Deps
) -> dict[str, Any]:
    """Cancel a running workflow: its waiting steps and unfinished step jobs are cancelled
    (409 if it has finished)."""
    view = deps.workflows.cancel(workflow_id)
    record_audit(request, caller, "workflow-cancel", workflow_id=workflow_id)
    return view.as_dict()


@router.post("/api/v1/workflows/{workflow_id}/retry", response_model=WorkflowOut)
def retry_workflow(
    workflow_id: WorkflowId, request: Request, caller: Admin, deps: Deps
) -> dict[str, Any]:
    """Run the failed and cancelled steps again and continue the workflow (409 if none)."""
    view = deps.workflows.retry(workflow_id)
    record_audit(request, caller, "workflow-retry", workflow_id=workflow_id, state=view.state)
    return view.as_dict()
