"""Workflows end to end with an in-process worker, on every backend: results flow along the DAG,
fan-in waits for every branch, failure policies, cancel cascade, retry, and the event feed."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.core import errors
from ledgerq.core import workflow as wf
from tests.helpers import running_worker, wait_until

FAST = {"poll_interval_seconds": 0.05, "concurrency": 4, "reconcile": False}
W = wf.WorkflowState
S = wf.StepState


def finished(app: LedgerQ, workflow_id: str) -> wf.WorkflowView | None:
    view = app.workflows.get(workflow_id)
    return view if view.state is not W.RUNNING else None


def steps_of(view: wf.WorkflowView) -> dict[str, wf.StepView]:
    return {s.name: s for s in view.steps}


def test_a_diamond_passes_results_along_and_fans_in_after_both_branches(app: LedgerQ) -> None:
    @app.task
    def fetch(ctx: JobContext, n: int) -> int:
        return n * 10

    @app.task
    def double(ctx: JobContext, upstream: dict[str, Any]) -> int:
        return int(upstream["fetch"]) * 2

    @app.task
    def plus_one(ctx: JobContext, upstream: dict[str, Any]) -> int:
        return int(upstream["fetch"]) + 1

    @app.task
    def render(ctx: JobContext, title: str, upstream: dict[str, Any]) -> str:
        return f"{title}: {upstream['double']} and {upstream['plus_one']}"

    flow = app.workflow("report", on_failure="stop")
    a = flow.step(fetch.s(4))
    b = flow.step(double.s(), after=[a])
    c = flow.step(plus_one.s(), after=[a])
    d = flow.step(render.s("sum"), after=[b, c])
    assert (a.name, b.name, c.name, d.name) == ("fetch", "double", "plus_one", "render")
    workflow_id = flow.enqueue()
    queued = steps_of(app.workflows.get(workflow_id))
    assert queued["fetch"].state is S.QUEUED and queued["render"].job_id is None

    with running_worker(app, **FAST):
        view = wait_until(lambda: finished(app, workflow_id), what="workflow finished")
    assert view.state is W.SUCCEEDED and view.steps_done == 4 and view.finished_at is not None
    steps = steps_of(view)
    jobs = {name: app.jobs.get(step.job_id or 0) for name, step in steps.items()}
    assert all(j.state is JobState.SUCCEEDED for j in jobs.values())
    assert all(j.workflow_id == workflow_id for j in jobs.values())
    assert jobs["render"].result_json == '"sum: 80 and 41"'
    # Fan-in: D started only after B and C had both finished (database clock).
    started = jobs["render"].started_at
    assert started is not None
    for branch in ("double", "plus_one"):
        branch_end = jobs[branch].finished_at
        assert branch_end is not None and branch_end <= started
        assert (jobs[branch].started_at or started) >= (jobs["fetch"].finished_at or started)

    with app.workflow_events(workflow_id) as feed:
        events = feed.poll()
    completed = [e for e in events if e.type == wf.STEP_COMPLETE]
    assert sorted(e.step or "" for e in completed) == ["double", "fetch", "plus_one", "render"]
    assert {e.step: e.result for e in completed}["fetch"] == 40
    assert events[-1].type == wf.WORKFLOW_FINISHED
    assert [e.id for e in events] == sorted(e.id for e in events)


class Branches:
    """root -> boom -> after_boom; root -> parked (on a queue no worker serves at first) ->
    after_parked. ``boom`` fails until ``healed`` is set."""

    def __init__(self, app: LedgerQ, policy: str) -> None:
        self.healed = threading.Event()

        @app.task
        def ok(ctx: JobContext, upstream: dict[str, Any] | None = None) -> str:
            return "ok"

        @app.task(max_attempts=1)
        def boom(ctx: JobContext, upstream: dict[str, Any] | None = None) -> str:
            if not self.healed.is_set():
                raise RuntimeError("boom")
            return "healed"

        flow = app.workflow("branches", on_failure=policy)
        root = flow.step(ok.s(), name="root")
        failing = flow.step(boom.s(), after=[root], name="boom")
        flow.step(ok.s(), after=[failing], name="after_boom")
        parked = flow.step(ok.s(), after=[root], name="parked", queue="parked")
        flow.step(ok.s(), after=[parked], name="after_parked")
        self.id = flow.enqueue()


def test_stop_policy_cancels_every_step_not_started_and_retry_finishes(app: LedgerQ) -> None:
    flow = Branches(app, "stop")
    with running_worker(app, **FAST):
        view = wait_until(lambda: finished(app, flow.id), what="workflow failed")
    steps = steps_of(view)
    assert view.state is W.FAILED
    assert steps["root"].state is S.SUCCEEDED and steps["boom"].state is S.FAILED
    assert steps["after_boom"].state is S.CANCELLED and steps["after_boom"].job_id is None
    # The parked step had a job that never started: it was cancelled with its dependent.
    assert steps["parked"].state is S.CANCELLED and steps["parked"].job_state == "cancelled"
    assert steps["after_parked"].state is S.CANCELLED

    flow.healed.set()
    retried = app.workflows.retry(flow.id)
    assert retried.state is W.RUNNING
    with running_worker(app, queues=("default", "parked"), **FAST):
        view = wait_until(lambda: finished(app, flow.id), what="workflow finished")
    assert view.state is W.SUCCEEDED
    assert all(s.state is S.SUCCEEDED for s in view.steps)
    with pytest.raises(errors.InvalidTransition):
        app.workflows.retry(flow.id)


def test_continue_policy_runs_independent_branches_on(app: LedgerQ) -> None:
    flow = Branches(app, "continue")
    with running_worker(app, **FAST):
        wait_until(
            lambda: steps_of(app.workflows.get(flow.id))["after_boom"].state is S.CANCELLED,
            what="dependent of the failed step cancelled",
        )
        view = app.workflows.get(flow.id)
        assert view.state is W.RUNNING
        assert steps_of(view)["parked"].state is S.QUEUED
    with running_worker(app, queues=("default", "parked"), **FAST):
        view = wait_until(lambda: finished(app, flow.id), what="workflow finished")
    steps = steps_of(view)
    assert view.state is W.FAILED
    assert steps["parked"].state is S.SUCCEEDED and steps["after_parked"].state is S.SUCCEEDED
    assert steps["boom"].state is S.FAILED and steps["after_boom"].state is S.CANCELLED


def test_cancel_cascades_to_pending_steps(app: LedgerQ) -> None:
    @app.task(queue="parked")
    def parked(ctx: JobContext, upstream: dict[str, Any] | None = None) -> None:
        return None

    flow = app.workflow("to-cancel")
    first = flow.step(parked.s())
    second = flow.step(parked.s(), after=[first])
    flow.step(parked.s(), after=[second])
    workflow_id = flow.enqueue()
    view = app.workflows.cancel(workflow_id)
    assert view.state is W.CANCELLED and view.finished_at is not None
    assert [s.state for s in view.steps] == [S.CANCELLED] * 3
    assert app.jobs.get(view.steps[0].job_id or 0).state is JobState.CANCELLED
    with pytest.raises(errors.InvalidTransition):
        app.workflows.cancel(workflow_id)
    with app.workflow_events(workflow_id) as feed:
        assert [e.type for e in feed.poll()] == [wf.WORKFLOW_FINISHED]


def test_bad_workflows_are_refused_before_anything_is_stored(app: LedgerQ) -> None:
    @app.task
    def step(ctx: JobContext, upstream: dict[str, object] | None = None) -> None:
        return None

    with pytest.raises(errors.InvalidJob, match="on_failure"):
        app.workflow("x", on_failure="sometimes")
    flow = app.workflow("x")
    first = flow.step(step.s(), name="same")
    with pytest.raises(errors.InvalidJob, match="two steps"):
        flow.step(step.s(), name="same")
    with pytest.raises(errors.InvalidJob, match="unknown steps"):
        flow.step(step.s(), after=[type(first)("nowhere")])
    with pytest.raises(errors.InvalidJob, match="upstream"):
        flow.step(step.s(upstream=1), after=[first])
    with pytest.raises(errors.InvalidJob, match="at least one step"):
        app.workflow("empty").enqueue()
    with pytest.raises(wf.WorkflowNotFound):
        app.workflows.get("missing")
    assert app.workflows.list() == []


def test_a_workflow_enqueued_in_the_callers_transaction_exists_only_if_it_commits(
    app: LedgerQ,
) -> None:
    @app.task
    def step(ctx: JobContext, upstream: dict[str, object] | None = None) -> None:
        return None

    engine = app.parts.store.engine

    def enqueue_in_transaction(fail: bool) -> str:
        flow = app.workflow("in-tx")
        flow.step(step.s())
        with engine.connect() as conn, app.transaction(conn) as tx:
            workflow_id = flow.enqueue(tx=tx)
            if fail:
                raise RuntimeError("the business write failed")
        return workflow_id

    with pytest.raises(RuntimeError):
        enqueue_in_transaction(fail=True)
    assert app.workflows.list() == [] and app.jobs.list() == []
    workflow_id = enqueue_in_transaction(fail=False)
    view = app.workflows.get(workflow_id)
    assert view.steps[0].state is S.QUEUED
    assert [j.id for j in app.jobs.list()] == [view.steps[0].job_id]
