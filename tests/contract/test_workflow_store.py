"""The WorkflowStore contract on every database: workflows are created whole, advanced by step
completions inside ``JobStore.complete_jobs``, listed, cancelled, retried, resumed and purged,
and their event feed reads in order from a cursor."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core import workflow as wf
from ledgerq.core.job import Claim, Job
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.workflows import SqlWorkflowStore
from tests.helpers import wait_until

S = JobState
W = wf.WorkflowState
P = wf.StepState
ARGS = '{"args":[],"kwargs":{}}'


@dataclass(frozen=True, slots=True)
class Ledger:
    """The job store whose completions advance workflows, and the workflow store."""

    jobs: SqlJobStore
    workflows: SqlWorkflowStore

    def claim(self) -> dict[str, Job]:
        """Claim every queued step job, by task name (each step's task is its name)."""
        claimed = self.jobs.claim_jobs(queues=["q"], worker_id="w", limit=100, lease_seconds=60)
        return {job.task: job for job in claimed}

    def finish(self, workflow_id: str, job: Job, state: JobState = S.SUCCEEDED) -> bool:
        """Write the outcome of ``job``, a step of ``workflow_id``; whether it applied."""
        done = Completion(Claim(job.id, job.attempt), state, workflow_id=workflow_id)
        return self.jobs.complete_jobs([done]) == [True]


@pytest.fixture
def ledger(engine: sa.Engine) -> Ledger:
    return Ledger(SqlJobStore(engine), SqlWorkflowStore(engine))


def create(ledger: Ledger, *steps: tuple[str, tuple[str, ...]], policy: str = "stop") -> str:
    """Store a workflow of ``(name, depends_on)`` steps (task = name) and return its id."""
    draft = wf.WorkflowDraft(
        id=f"wf-{secrets.token_hex(6)}",
        name="flow",
        on_failure=wf.FailurePolicy(policy),
        steps=tuple(
            wf.StepDraft(name=name, task=name, queue="q", args_json=ARGS, depends_on=after)
            for name, after in steps
        ),
    )
    return ledger.workflows.create_workflow(draft)


def states(view: wf.WorkflowView) -> dict[str, wf.StepState]:
    return {step.name: step.state for step in view.steps}


DIAMOND = (("a", ()), ("b", ("a",)), ("c", ()))


def test_a_new_workflow_queues_only_its_steps_without_dependencies(ledger: Ledger) -> None:
    workflow_id = create(ledger, *DIAMOND)
    view = ledger.workflows.get_workflow(workflow_id)
    assert (view.state, view.steps_total, view.steps_done) == (W.RUNNING, 3, 0)
    assert states(view) == {"a": P.QUEUED, "b": P.WAITING, "c": P.QUEUED}
    steps = {step.name: step for step in view.steps}
    assert steps["b"].job_id is None and steps["b"].depends_on == ("a",)
    assert set(ledger.claim()) == {"a", "c"}
    with pytest.raises(wf.WorkflowNotFound):
        ledger.workflows.get_workflow("wf-nobody")


def test_step_completions_advance_the_workflow_and_feed_its_events(ledger: Ledger) -> None:
    workflow_id = create(ledger, *DIAMOND)
    first = ledger.claim()
    assert ledger.finish(workflow_id, first["a"])
    assert states(ledger.workflows.get_workflow(workflow_id))["b"] is P.QUEUED
    second = ledger.claim()
    assert set(second) == {"b"}
    assert ledger.finish(workflow_id, second["b"]) and ledger.finish(workflow_id, first["c"])
    done = ledger.workflows.get_workflow(workflow_id)
    assert (done.state, done.steps_done) == (W.SUCCEEDED, 3) and done.finished_at is not None
    events = ledger.workflows.events_after(0, workflow_id=workflow_id)
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [(e.type, e.step) for e in events] == [
        (wf.STEP_COMPLETE, "a"),
        (wf.STEP_COMPLETE, "b"),
        (wf.STEP_COMPLETE, "c"),
        (wf.WORKFLOW_FINISHED, None),
    ]
    # A cursor reads what came after it; ``also_ids`` re-reads gaps a reader still awaits.
    assert ledger.workflows.events_after(events[1].id, workflow_id=workflow_id) == events[2:]
    again = ledger.workflows.events_after(events[-1].id, also_ids=[events[0].id])
    assert again == events[:1]


def test_workflows_list_newest_first_and_by_state(ledger: Ledger) -> None:
    older = create(ledger, ("a", ()))
    time.sleep(0.01)
    newer = create(ledger, ("a", ()))
    ledger.workflows.cancel_workflow(older)
    assert [v.id for v in ledger.workflows.list_workflows()] == [newer, older]
    assert [v.id for v in ledger.workflows.list_workflows(state=W.CANCELLED)] == [older]
    assert [v.id for v in ledger.workflows.list_workflows(limit=1)] == [newer]


def test_cancel_stops_unfinished_steps_and_refuses_their_late_completions(
    ledger: Ledger,
) -> None:
    workflow_id = create(ledger, *DIAMOND)
    running = ledger.claim()
    view = ledger.workflows.cancel_workflow(workflow_id)
    assert view.state is W.CANCELLED and view.finished_at is not None
    assert set(states(view).values()) == {P.CANCELLED}
    assert not ledger.finish(workflow_id, running["a"])
    assert ledger.jobs.get_job(running["a"].id).state is S.CANCELLED
    with pytest.raises(errors.InvalidTransition):
        ledger.workflows.cancel_workflow(workflow_id)
    with pytest.raises(wf.WorkflowNotFound):
        ledger.workflows.cancel_workflow("wf-nobody")


def test_retry_runs_broken_steps_again_and_continues(ledger: Ledger) -> None:
    workflow_id = create(ledger, *DIAMOND)
    with pytest.raises(errors.InvalidTransition):
        ledger.workflows.retry_workflow(workflow_id)  # nothing failed or was cancelled
    ledger.workflows.cancel_workflow(workflow_id)
    view = ledger.workflows.retry_workflow(workflow_id)
    assert view.state is W.RUNNING and view.finished_at is None
    assert states(view) == {"a": P.QUEUED, "b": P.WAITING, "c": P.QUEUED}
    assert set(ledger.claim()) == {"a", "c"}


def test_resume_records_step_jobs_finished_outside_completions(ledger: Ledger) -> None:
    workflow_id = create(ledger, ("a", ()), ("b", ("a",)))
    (job,) = ledger.claim().values()
    # An operator cancels the step's job: no completion advances the workflow.
    ledger.jobs.cancel_job(job.id)
    assert ledger.workflows.resume_stalled(stuck_after_seconds=3600) == []
    repaired = wait_until(
        lambda: ledger.workflows.resume_stalled(stuck_after_seconds=0.05), what="resumed"
    )
    assert repaired == [workflow_id]
    view = ledger.workflows.get_workflow(workflow_id)
    assert view.state is W.FAILED and states(view) == {"a": P.CANCELLED, "b": P.CANCELLED}
    assert ledger.workflows.resume_stalled(stuck_after_seconds=0) == []  # repeats are harmless


def test_purge_deletes_finished_workflows_past_their_retention_only(ledger: Ledger) -> None:
    finished = create(ledger, ("a", ()))
    running = create(ledger, ("a", ()))
    ledger.workflows.cancel_workflow(finished)
    assert (
        ledger.workflows.purge_finished(
            succeeded_after_seconds=0, failed_after_seconds=3600, limit=10
        )
        == 0
    )
    purged = wait_until(
        lambda: ledger.workflows.purge_finished(
            succeeded_after_seconds=0, failed_after_seconds=0.05, limit=10
        ),
        what="purged",
    )
    assert purged == 1
    with pytest.raises(wf.WorkflowNotFound):
        ledger.workflows.get_workflow(finished)
    assert ledger.workflows.events_after(0, workflow_id=finished) == []
    assert ledger.workflows.get_workflow(running).state is W.RUNNING
