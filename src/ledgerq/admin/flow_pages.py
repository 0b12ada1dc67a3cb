"""The dashboard's batch and workflow pages: batches with their progress, one batch with its
members, workflows, and one workflow with its DAG drawn (``dag_svg``). Read through the same
``BatchClient`` and ``Workflows`` as their HTTP endpoints; actions post to those endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from ledgerq.admin import coordination_page, dag_svg, pages, schemas
from ledgerq.admin.dashboard import render_page, session_caller, to_login
from ledgerq.admin.deps import AdminDeps, job_document
from ledgerq.core.batches import BatchStatus
from ledgerq.core.states import JobState
from ledgerq.core.workflow import StepView, WorkflowView

router = APIRouter(include_in_schema=False)

#: Batches and workflows a list page shows (the newest).
LISTED = 100
#: Member jobs a batch page lists.
MEMBERS_SHOWN = 200
#: The order of a batch bar's segments: finished states first.
SEGMENTS = (
    JobState.SUCCEEDED,
    JobState.DEAD,
    JobState.CANCELLED,
    JobState.RUNNING,
    JobState.FAILED,
    JobState.QUEUED,
    JobState.SCHEDULED,
    JobState.HELD,
)
BAR_WIDTH = 240

BatchId = Annotated[int, Path(ge=1, le=2**63 - 1)]
WorkflowId = Annotated[str, Path(min_length=1, max_length=64, pattern=schemas.KEY_PATTERN)]


def batch_bar(status: BatchStatus) -> str:
    """The batch's members as one bar of coloured segments (an SVG, so no inline style)."""
    size = max(status.size, 1)
    parts, x = [], 0.0
    for state in SEGMENTS:
        n = status.counts.get(state, 0)
        if not n:
            continue
        width = BAR_WIDTH * n / size
        parts.append(
            f'<rect class="seg {state.value}" x="{x:.1f}" y="0" width="{width:.1f}"'
            f' height="12"><title>{n} {state.value}</title></rect>'
        )
        x += width
    return (
        f'<svg class=batchbar width="{BAR_WIDTH}" height="12" role=img'
        f' aria-label="{status.finished} of {status.size} finished">'
        f'<rect class=track x="0" y="0" width="{BAR_WIDTH}" height="12"/>'
        + "".join(parts)
        + f"</svg> <span class=bar-text>{status.finished} / {status.size}</span>"
    )


def _counts(status: BatchStatus) -> str:
    return " ".join(
        f'<span class="state {s.value}">{status.counts[s]} {s.value}</span>'
        for s in SEGMENTS
        if status.counts.get(s)
    )


def batch_rows(batches: Sequence[BatchStatus]) -> list[str]:
    """One row per batch: link, created, progress bar, members per state, callbacks."""
    return [
        f'<tr data-batch-id="{b.id}"><td><a href="/dashboard/batches/{b.id}">{b.id}</a></td>'
        f"<td>{pages.e(b.created_at)}</td><td>{batch_bar(b)}</td><td>{_counts(b)}</td>"
        f"<td>{pages.e(', '.join(f'{k.value}: {v.task}' for k, v in b.callbacks.items()))}"
        "</td></tr>"
        for b in batches
    ]


BATCH_HEADERS = ("batch", "created", "progress", "members", "callbacks")


@router.get("/dashboard/batches")
def batches_page(request: Request) -> Response:
    """The newest batches with their progress."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    rows = batch_rows(deps.batches.list(limit=LISTED))
    body = "<h2>Batches</h2>" + pages.table(BATCH_HEADERS, rows, table_id="batches")
    return render_page(request, "Batches", body, caller)


@router.get("/dashboard/batches/{batch_id}")
def batch_page(request: Request, batch_id: BatchId) -> Response:
    """One batch: progress, callbacks and when they fired, its member jobs, and retrying its
    dead and failed members."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    status = deps.batches.get(batch_id)
    members = [job_document(j) for j in deps.batches.members(batch_id, limit=MEMBERS_SHOWN)]
    fired = "".join(
        f"<tr><th>{pages.e(event.value)} callback</th><td>{pages.e(cb.task)}"
        f" · {pages.e(status.fired_at.get(event)) or 'not fired'}</td></tr>"
        for event, cb in status.callbacks.items()
    )
    retry = ""
    if status.counts.get(JobState.DEAD) or status.counts.get(JobState.FAILED):
        retry = pages.action("Retry failed members", f"/api/v1/batches/{batch_id}/retry-failed")
    body = (
        f"<h2>Batch {batch_id}</h2><p>{retry}</p><table class=detail>"
        f"<tr><th>created</th><td>{pages.e(status.created_at)}</td></tr>"
        f"<tr><th>progress</th><td id=batch-progress>{batch_bar(status)}</td></tr>"
        f"<tr><th>members</th><td>{_counts(status)}</td></tr>{fired}</table>"
        f"<h3>Members</h3>"
        + pages.table(pages.JOB_HEADERS, pages.job_rows(members), table_id="members")
    )
    return render_page(request, f"Batch {batch_id}", body, caller)


@router.get("/dashboard/workflows")
def workflows_page(request: Request) -> Response:
    """The newest workflows with their state and finished steps."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    rows = coordination_page.workflow_rows(deps.workflows.list(limit=LISTED))
    body = "<h2>Workflows</h2>" + pages.table(
        coordination_page.WORKFLOW_HEADERS, rows, table_id="workflow-list"
    )
    return render_page(request, "Workflows", body, caller)


def step_rows(steps: Sequence[StepView]) -> list[str]:
    """One row per step: dependencies, state and a link to its job."""
    rows = []
    for step in steps:
        state = dag_svg.step_state(step)
        job = "-"
        if step.job_id is not None:
            job = f'<a href="/dashboard/jobs/{int(step.job_id)}">{int(step.job_id)}</a>'
        rows.append(
            f'<tr data-step="{pages.e(step.name)}"><td>{pages.e(step.name)}</td>'
            f"<td>{pages.e(step.task)}</td><td>{pages.e(', '.join(step.depends_on)) or '-'}</td>"
            f'<td><span class="state {pages.e(state)}">{pages.e(state)}</span></td>'
            f"<td>{job}</td>"
            f"<td>{pages.e(step.finished_at) or '-'}</td></tr>"
        )
    return rows


STEP_HEADERS = ("step", "task", "depends on", "state", "job", "finished")


def _workflow_actions(view: WorkflowView) -> str:
    base = f"/api/v1/workflows/{quote(view.id, safe='')}"
    out = []
    if view.state.value == "running":
        out.append(pages.action("Cancel workflow", f"{base}/cancel", danger=True))
    if any(s.state.value in ("failed", "cancelled") for s in view.steps):
        out.append(pages.action("Retry failed steps", f"{base}/retry"))
    return " ".join(out)


@router.get("/dashboard/workflows/{workflow_id}")
def workflow_page(request: Request, workflow_id: WorkflowId) -> Response:
    """One workflow: its DAG with each step's state, the steps and their jobs."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    view = deps.workflows.get(workflow_id)
    body = (
        f"<h2>Workflow {pages.e(view.id)} <small>{pages.e(view.name)}</small></h2>"
        f"<p>{_workflow_actions(view)}</p><table class=detail>"
        f'<tr><th>state</th><td><span class="state {pages.e(view.state.value)}"'
        f" id=workflow-state>{pages.e(view.state.value)}</span></td></tr>"
        f"<tr><th>steps</th><td>{pages.progress_bar(view.steps_done, view.steps_total)}</td></tr>"
        f"<tr><th>on failure</th><td>{pages.e(view.on_failure.value)}</td></tr>"
        f"<tr><th>created</th><td>{pages.e(view.created_at)}</td></tr>"
        f"<tr><th>finished</th><td>{pages.e(view.finished_at) or '-'}</td></tr></table>"
        f"<h3>Steps</h3><div class=dag-box>{dag_svg.render(view.steps)}</div>"
        + pages.table(STEP_HEADERS, step_rows(view.steps), table_id="steps")
    )
    return render_page(request, f"Workflow {view.id}", body, caller)
