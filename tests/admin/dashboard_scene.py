"""A ledger with something on every dashboard page: a batch whose members succeed, die and
stop part way through their items, and a workflow whose steps succeed, fail and are
cancelled. Shared by the HTTP and the browser tests of the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgerq import JobContext, LedgerQ, Task
from ledgerq.core.workflow import WorkflowState
from tests.helpers import running_worker, wait_until


@dataclass(frozen=True)
class Scene:
    """What ``build`` stored: the batch and its members, and the workflow."""

    batch_id: int
    member_ids: list[int]
    items_job: int
    """A member that finished 3 of its 5 items, then died."""
    boom_job: int
    workflow_id: str


def register_steps(app: LedgerQ) -> tuple[Task[..., str], Task[..., None]]:
    """Workflow step tasks (a step with dependencies receives ``upstream``): one that
    succeeds and one that fails for good."""

    @app.task(name="admin.step", queue="default")
    def step(ctx: JobContext, upstream: dict[str, Any] | None = None) -> str:
        return "ok"

    @app.task(name="admin.step_fail", queue="default", max_attempts=1)
    def step_fail(ctx: JobContext, upstream: dict[str, Any] | None = None) -> None:
        raise RuntimeError("enrichment source is down")

    return step, step_fail


def build(app: LedgerQ) -> Scene:
    """Store the batch and the workflow (nothing runs yet)."""
    step, step_fail = register_steps(app)
    batch = app.batch(
        [
            ("admin.add", (1, 2)),
            ("admin.add", (3, 4)),
            ("admin.add", (5, 6)),
            ("admin.items", (5, 3)),
            ("admin.boom", ("batch member failed",)),
        ]
    )
    assert batch.id is not None
    flow = app.workflow("nightly-report", on_failure="continue")
    extract = flow.step(step.s(), name="extract")
    clean = flow.step(step.s(), after=[extract], name="clean")
    enrich = flow.step(step_fail.s(), after=[extract], name="enrich")
    flow.step(step.s(), after=[clean, enrich], name="report")
    ids = batch.job_ids
    return Scene(batch.id, ids, ids[3], ids[4], flow.enqueue())


def run(app: LedgerQ, scene: Scene) -> None:
    """Run a worker until the batch and the workflow have finished."""
    with running_worker(app, queues=("default", "mail"), poll_interval_seconds=0.05):
        wait_until(
            lambda: app.batches.get(scene.batch_id).finished == len(scene.member_ids),
            timeout=30,
            what="batch finished",
        )
        wait_until(
            lambda: app.workflows.get(scene.workflow_id).state is not WorkflowState.RUNNING,
            timeout=30,
            what="workflow finished",
        )
