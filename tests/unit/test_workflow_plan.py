"""The pure workflow rule: which waiting steps become jobs, which are cancelled, and when a
workflow has finished, for chains, fan-out, fan-in and both failure policies."""

from __future__ import annotations

import pytest

from ledgerq.core import errors
from ledgerq.core import workflow as wf

S, W, P = wf.StepState, wf.WorkflowState, wf.FailurePolicy


def diamond(
    a: wf.StepState, b: wf.StepState, c: wf.StepState, d: wf.StepState
) -> list[wf.StepStatus]:
    return [
        wf.StepStatus("a", (), a),
        wf.StepStatus("b", ("a",), b),
        wf.StepStatus("c", ("a",), c),
        wf.StepStatus("d", ("b", "c"), d),
    ]


def test_roots_are_ready_first_then_fan_out_then_fan_in() -> None:
    assert wf.plan(
        diamond(S.WAITING, S.WAITING, S.WAITING, S.WAITING), P.STOP, W.RUNNING
    ).ready == ("a",)
    fan_out = wf.plan(diamond(S.SUCCEEDED, S.WAITING, S.WAITING, S.WAITING), P.STOP, W.RUNNING)
    assert fan_out.ready == ("b", "c")
    # D waits for both branches.
    assert (
        wf.plan(diamond(S.SUCCEEDED, S.SUCCEEDED, S.QUEUED, S.WAITING), P.STOP, W.RUNNING).ready
        == ()
    )
    fan_in = wf.plan(diamond(S.SUCCEEDED, S.SUCCEEDED, S.SUCCEEDED, S.WAITING), P.STOP, W.RUNNING)
    assert fan_in.ready == ("d",) and fan_in.state is W.RUNNING
    done = wf.plan(diamond(*[S.SUCCEEDED] * 4), P.STOP, W.RUNNING)
    assert done == wf.Plan(state=W.SUCCEEDED)


def test_stop_cancels_everything_not_started_and_fails_at_once() -> None:
    decided = wf.plan(diamond(S.SUCCEEDED, S.FAILED, S.QUEUED, S.WAITING), P.STOP, W.RUNNING)
    assert decided == wf.Plan(cancel=("d",), stop_unstarted=True, state=W.FAILED)


def test_continue_cancels_only_dependents_and_finishes_when_all_are_final() -> None:
    steps = [
        wf.StepStatus("a", (), S.FAILED),
        wf.StepStatus("a2", ("a",), S.WAITING),
        wf.StepStatus("a3", ("a2",), S.WAITING),
        wf.StepStatus("b", (), S.SUCCEEDED),
        wf.StepStatus("b2", ("b",), S.WAITING),
    ]
    decided = wf.plan(steps, P.CONTINUE, W.RUNNING)
    assert decided == wf.Plan(ready=("b2",), cancel=("a2", "a3"), state=W.RUNNING)
    final = [*steps[:1], *(wf.StepStatus(s.name, s.depends_on, S.CANCELLED) for s in steps[1:3])]
    final += [steps[3], wf.StepStatus("b2", ("b",), S.SUCCEEDED)]
    assert wf.plan(final, P.CONTINUE, W.RUNNING).state is W.FAILED


def test_a_finished_or_cancelled_workflow_does_nothing_more() -> None:
    steps = diamond(S.SUCCEEDED, S.WAITING, S.WAITING, S.WAITING)
    assert wf.plan(steps, P.STOP, W.CANCELLED) == wf.Plan(state=W.CANCELLED)


def test_bad_graphs_and_policies_are_refused() -> None:
    with pytest.raises(errors.InvalidJob, match="unknown steps"):
        wf.check_dag([wf.StepStatus("a", ("b",), S.WAITING), wf.StepStatus("b", (), S.WAITING)])
    with pytest.raises(errors.InvalidJob, match="invalid step name"):
        wf.check_dag([wf.StepStatus("bad name", (), S.WAITING)])
    with pytest.raises(errors.InvalidJob, match="on_failure"):
        wf.check_policy("retry")
