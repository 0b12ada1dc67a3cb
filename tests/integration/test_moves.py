"""The fenced moves spelled once (``store/moves.py``): checked against the transition table,
and the reconciler's stuck-job reset burying a workflow step as a failover does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.core import errors
from ledgerq.core import workflow as wf
from ledgerq.store import moves
from tests.helpers import wait_until

S = JobState


def test_a_move_the_transition_table_does_not_allow_fails_when_it_is_made() -> None:
    with pytest.raises(errors.InvalidTransition):
        moves.Move("revive", frozenset({S.RUNNING}), source=S.SUCCEEDED)
    assert moves.POSTPONE.targets == {S.SCHEDULED} and moves.PUT_BACK.targets == {S.QUEUED}


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url)
    yield application
    application.close()


def test_a_step_buried_by_the_stuck_job_reset_fails_its_workflow_at_once(app: LedgerQ) -> None:
    @app.task(name="fragile", max_attempts=1)
    def fragile(ctx: JobContext) -> int:
        return 1

    flow = app.workflow("fragile", on_failure="stop")
    first = flow.step(fragile.s(), name="first")
    flow.step(fragile.s(), after=[first], name="second")
    workflow_id = flow.enqueue()
    (job,) = app.parts.store.claim_jobs(
        queues=["default"], worker_id="lost", limit=10, lease_seconds=60
    )
    repair = app.parts.repair
    wait_until(
        lambda: repair.reset_stuck_jobs(stuck_after_seconds=0.2, limit=10).dead == [job.id],
        what="stuck reset",
    )
    buried = app.parts.store.get_job(job.id)
    assert buried.state is S.DEAD
    error = json.loads(buried.error_json or "{}")
    assert error["kind"] == "stuck" and error["attempt"] == job.attempt
    view = app.workflows.get(workflow_id)
    assert view.state is wf.WorkflowState.FAILED
    assert {s.name: s.state for s in view.steps} == {
        "first": wf.StepState.FAILED,
        "second": wf.StepState.CANCELLED,
    }
