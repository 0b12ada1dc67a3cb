"""``/api/v1/workflows``: list, show, cancel and retry workflows (DAGs of steps) through the
same ``Workflows`` as ``ledgerq workflow`` (read token to look, admin token to change)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from ledgerq.admin import schemas
from ledgerq.admin.api import ERRORS, Admin, Deps, Reader, record_audit
from ledgerq.core.workflow import WorkflowState

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


class WorkflowList(BaseModel):
    """Newest workflows first."""

    workflows: list[WorkflowOut]


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
