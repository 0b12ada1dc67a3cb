"""Workflows the completion hook could not advance, on every backend: a step job that finished
without it (an older worker, failover to ``dead``, an operator's cancel) stalls its workflow
until the reconciler resumes it after ``WORKFLOW_STUCK_AFTER``; and the event feed delivers
every event, including ones committed out of id order."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.app.wiring import build_reconciler
from ledgerq.core import workflow as wf
from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from ledgerq.runtime.reconciler import Reconciler
from ledgerq.store.tables import workflow_events
from ledgerq.transport.polling import PollingTransport
from tests.helpers import wait_until

S = wf.StepState


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, workflow_stuck_after=0.2)
    yield application
    application.close()


def chain(app: LedgerQ) -> str:
    @app.task(name="step")
    def step(ctx: JobContext, n: int, upstream: dict[str, int] | None = None) -> int:
        return n + sum((upstream or {}).values())

    flow = app.workflow("chain", on_failure="stop")
    first = flow.step(step.s(1), name="first")
    flow.step(step.s(10), after=[first], name="second")
    return flow.enqueue()


def finish_without_hook(app: LedgerQ, state: JobState, result: str | None = None) -> int:
    """Claim the one queued job and write its outcome as a writer that knows nothing of
    workflows would (no ``workflow_id`` on the completion): the workflow is not advanced."""
    (job,) = app.parts.store.claim_jobs(
        queues=["default"], worker_id="old-worker", limit=10, lease_seconds=30
    )
    done = Completion(Claim(job.id, job.attempt), state, result_json=result)
    assert app.parts.store.complete_jobs([done]) == [True]
    return job.id


def reconciler(app: LedgerQ) -> Reconciler:
    return build_reconciler(app.settings, app.parts, PollingTransport())


def test_the_reconciler_resumes_a_workflow_whose_step_finished_unrecorded(app: LedgerQ) -> None:
    workflow_id = chain(app)
    finish_without_hook(app, JobState.SUCCEEDED, "1")
    stalled = {s.name: s for s in app.workflows.get(workflow_id).steps}
    assert stalled["first"].state is S.QUEUED and stalled["second"].job_id is None

    repair = reconciler(app)
    report = wait_until(
        lambda: (r := repair.run_once()).workflows_resumed and r, what="workflow resumed"
    )
    assert report.workflows_resumed == 1
    steps = {s.name: s for s in app.workflows.get(workflow_id).steps}
    assert steps["first"].state is S.SUCCEEDED and steps["second"].state is S.QUEUED
    second = app.jobs.get(steps["second"].job_id or 0)
    assert second.state is JobState.QUEUED
    assert json.loads(second.args_json)["kwargs"] == {"upstream": {"first": 1}}
    # Nothing more to repair: a second pass leaves it alone.
    assert repair.run_once().workflows_resumed == 0
    with app.workflow_events(workflow_id) as feed:
        assert [(e.type, e.step, e.result) for e in feed.poll()] == [(wf.STEP_COMPLETE, "first", 1)]


def test_a_step_that_died_outside_the_hook_fails_its_workflow_on_resume(app: LedgerQ) -> None:
    workflow_id = chain(app)
    finish_without_hook(app, JobState.DEAD)
    repair = reconciler(app)
    wait_until(lambda: repair.run_once().workflows_resumed, what="workflow resumed")
    view = app.workflows.get(workflow_id)
    assert view.state is wf.WorkflowState.FAILED
    assert [s.state for s in view.steps] == [S.FAILED, S.CANCELLED]


def test_a_workflow_making_progress_is_not_touched(database_url: str) -> None:
    app = LedgerQ(database_url=database_url)  # WORKFLOW_STUCK_AFTER: the default 10 minutes
    try:
        workflow_id = chain(app)
        finish_without_hook(app, JobState.SUCCEEDED, "1")
        assert reconciler(app).run_once().workflows_resumed == 0
        assert app.workflows.get(workflow_id).steps[0].state is S.QUEUED
    finally:
        app.close()


def test_the_feed_of_all_workflows_delivers_events_committed_out_of_order(
    app: LedgerQ, backend: str
) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite serializes writers: ids cannot commit out of order")
    engine = app.parts.store.engine
    row = {"workflow_id": "w", "type": wf.STEP_COMPLETE, "step": "s", "created_at": sa.func.now()}
    with app.workflow_events(after=0) as feed:
        with engine.connect() as slow:
            slow.begin()
            slow.execute(sa.insert(workflow_events).values(row))  # takes the smaller id
            with engine.begin() as fast:
                fast.execute(sa.insert(workflow_events).values(row))
            first = feed.poll()
            slow.commit()
        late = feed.poll()
        assert len(first) == 1 and len(late) == 1
        assert late[0].id < first[0].id  # the gap was filled
        assert feed.poll() == []


def test_a_subscriber_receives_every_event_from_the_database_feed(app: LedgerQ) -> None:
    received: list[wf.WorkflowEvent] = []
    workflow_id = chain(app)
    with app.workflow_events(workflow_id, poll_interval=0.05) as feed:
        feed.subscribe(received.append)
        finish_without_hook(app, JobState.SUCCEEDED, "1")
        wait_until(lambda: reconciler(app).run_once().workflows_resumed, what="resumed")
        finish_without_hook(app, JobState.SUCCEEDED, "11")
        wait_until(lambda: reconciler(app).run_once().workflows_resumed, what="resumed")
        wait_until(lambda: len(received) == 3, what="three events")
    assert [(e.type, e.step, e.result) for e in received] == [
        (wf.STEP_COMPLETE, "first", 1),
        (wf.STEP_COMPLETE, "second", 11),
        (wf.WORKFLOW_FINISHED, None, None),
    ]


def test_finished_workflows_go_after_their_retention_with_steps_and_events(app: LedgerQ) -> None:
    from ledgerq.store.tables import workflow_steps, workflows

    @app.task(name="one")
    def one(ctx: JobContext) -> int:
        return 1

    def single() -> str:
        flow = app.workflow("single")
        flow.step(one.s(), name="only")
        return flow.enqueue()

    ids = [single() for _ in range(4)]
    old, recent, failed_old, running = ids
    engine = app.parts.store.engine
    with engine.begin() as conn:
        conn.execute(
            sa.insert(workflow_events).values(
                workflow_id=old,
                type="workflow:step:complete",
                step="first",
                created_at=sa.func.current_timestamp(),
            )
        )

    def finish(workflow_id: str, state: str, hours_ago: float) -> None:
        values = {"state": state, "finished_at": sa.func.current_timestamp()}
        with engine.begin() as conn:
            conn.execute(sa.update(workflows).where(workflows.c.id == workflow_id).values(values))
        if hours_ago:  # the database's clock, moved back in Python (every dialect)
            with engine.begin() as conn:
                at = conn.execute(
                    sa.select(workflows.c.finished_at).where(workflows.c.id == workflow_id)
                ).scalar_one()
                from datetime import timedelta

                back = {"finished_at": at - timedelta(hours=hours_ago)}
                conn.execute(sa.update(workflows).where(workflows.c.id == workflow_id).values(back))

    finish(old, "succeeded", 3)
    finish(recent, "succeeded", 0)
    finish(failed_old, "failed", 3)
    store = app.parts.workflows
    # The reconciler's pass, with retentions of 1 h (succeeded) and 5 h (failed): only
    # ``old`` is past its retention.
    update = {"retention_succeeded": 3600.0, "retention_failed": 18000.0}
    repair = build_reconciler(app.settings.model_copy(update=update), app.parts, PollingTransport())
    assert repair.run_once().deleted_workflows == 1
    assert (
        store.purge_finished(succeeded_after_seconds=3600, failed_after_seconds=3600, limit=10) == 1
    )
    with engine.connect() as conn:
        left = set(conn.execute(sa.select(workflows.c.id)).scalars())
        steps = set(conn.execute(sa.select(workflow_steps.c.workflow_id)).scalars())
        events = set(conn.execute(sa.select(workflow_events.c.workflow_id)).scalars())
    assert left == steps == {recent, running}
    assert old not in events and failed_old not in events


def fragile_flow(app: LedgerQ, worker_id: str) -> tuple[str, int]:
    """A two-step ``stop`` workflow of a task with one attempt whose first step ``worker_id``
    claimed; returns the workflow's id and the claimed job's."""

    @app.task(name="fragile", max_attempts=1)
    def fragile(ctx: JobContext, upstream: dict[str, int] | None = None) -> int:
        return 1

    flow = app.workflow("fragile", on_failure="stop")
    first = flow.step(fragile.s(), name="first")
    flow.step(fragile.s(), after=[first], name="second")
    workflow_id = flow.enqueue()
    (job,) = app.parts.store.claim_jobs(
        queues=["default"], worker_id=worker_id, limit=10, lease_seconds=60
    )
    return workflow_id, job.id


def assert_failed_at_once(app: LedgerQ, workflow_id: str) -> None:
    view = app.workflows.get(workflow_id)
    assert view.state is wf.WorkflowState.FAILED
    assert {s.name: s.state for s in view.steps} == {"first": S.FAILED, "second": S.CANCELLED}


def test_a_step_that_dies_by_failover_fails_its_workflow_at_once(app: LedgerQ) -> None:
    from ledgerq.core import fleet

    ws = app.parts.fleet
    ws.register_worker(fleet.Registration("dying", "host", 1, ("default",), 1, "0"))
    workflow_id, job_id = fragile_flow(app, "dying")
    wait_until(lambda: ws.fail_over_workers(ttl_seconds=0.2, detected_by="test"), what="failover")
    assert app.parts.store.get_job(job_id).state is JobState.DEAD
    # No reconciler ran (WORKFLOW_STUCK_AFTER is not involved): the failover recorded it.
    assert_failed_at_once(app, workflow_id)


def test_a_step_buried_by_the_stuck_job_reset_fails_its_workflow_at_once(app: LedgerQ) -> None:
    workflow_id, job_id = fragile_flow(app, "lost")
    repair = app.parts.repair
    wait_until(
        lambda: repair.reset_stuck_jobs(stuck_after_seconds=0.2, limit=10).dead == [job_id],
        what="stuck reset",
    )
    buried = app.parts.store.get_job(job_id)
    assert buried.state is JobState.DEAD
    error = json.loads(buried.error_json or "{}")
    assert error["kind"] == "stuck" and error["attempt"] == 1
    # The reset buries as a failover does (moves.requeue_or_bury): the step failed with it.
    assert_failed_at_once(app, workflow_id)
