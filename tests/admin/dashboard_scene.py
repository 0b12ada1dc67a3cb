"""A ledger with something on every dashboard page: a batch whose members succeed, die and
stop part way through their items, a workflow whose steps succeed, fail and are cancelled,
and a worker failed over with the jobs it held. Shared by the HTTP and the browser tests of
the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ, Task
from ledgerq.core import fleet
from ledgerq.core.workflow import WorkflowState
from ledgerq.store.tables import queue_workers
from tests.helpers import running_worker, wait_until

#: The worker ``fail_over_a_busy_worker`` registers and fails over.
LOST = "w-lost@host-c"
#: Who notices it (as a live worker's failover check names itself).
DETECTED_BY = "worker w-alive@host-a"


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


def fail_over_a_busy_worker(app: LedgerQ) -> tuple[int, int]:
    """A registered worker that holds two running jobs and stops beating, failed over: one
    job goes back to the queue, the other (its one attempt spent) is buried. Returns their
    ids (requeued, buried)."""
    admin, client = app.parts.fleet, app.client
    admin.register_worker(fleet.Registration(LOST, "host-c", 1, ("default", "mail"), 4, "1"))
    again = client.enqueue([client.build("admin.add", [1, 2])])[0].job_id
    buried = client.enqueue([client.build("admin.boom", ["lost"])])[0].job_id
    for queue in ("default", "mail"):
        client.store.claim_jobs(queues=[queue], worker_id=LOST, limit=1, lease_seconds=60)
    long_ago = admin.failover.dialect.bind_time(datetime.now(UTC) - timedelta(hours=1))
    with app.parts.store.engine.begin() as conn:
        stale = sa.update(queue_workers).where(queue_workers.c.id == LOST)
        conn.execute(stale.values(heartbeat_at=long_ago))
    (event,) = admin.fail_over_workers(ttl_seconds=60, detected_by=DETECTED_BY)
    assert (event.requeued, event.dead) == ((again,), (buried,))
    return again, buried
