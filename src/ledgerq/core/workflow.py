"""Workflows as data: the DAG of steps, their states, and the pure rule (``plan``) that decides
which waiting steps become jobs, which are cancelled, and when a workflow has finished.

A step is a row until all its dependencies succeeded; only then does it become a job (see
docs/workflows.md). ``plan`` is a function of the step states alone, so the completion hook and
the reconciler's resumption run the same rule and repeating it changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from ledgerq.core import errors
from ledgerq.core.job import JobHint

STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
#: Type of the event a succeeded step emits.
STEP_COMPLETE = "workflow:step:complete"
#: Type of the event a failed or cancelled step emits.
STEP_FAILED = "workflow:step:failed"
#: Type of the event a workflow emits when it reaches a final state.
WORKFLOW_FINISHED = "workflow:finished"
#: Keyword argument that carries the results of a step's dependencies to its handler.
UPSTREAM_KWARG = "upstream"


class StepState(StrEnum):
    """Where a step is: ``waiting`` (no job yet), ``queued`` (its job exists), or final."""

    WAITING = "waiting"
    QUEUED = "queued"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class WorkflowState(StrEnum):
    """``running`` until every step is final; then ``succeeded`` or ``failed``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FailurePolicy(StrEnum):
    """``stop``: a failed step cancels every step not started; ``continue``: only the steps
    that depend on the failed one are cancelled, independent branches run on."""

    STOP = "stop"
    CONTINUE = "continue"


FINAL_STEPS = frozenset({StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED})
BROKEN_STEPS = frozenset({StepState.FAILED, StepState.CANCELLED})


def check_policy(value: str) -> FailurePolicy:
    """Return the policy named ``value`` or raise ``InvalidJob``."""
    try:
        return FailurePolicy(value)
    except ValueError:
        raise errors.InvalidJob(f"on_failure must be 'stop' or 'continue', got {value!r}") from None


@dataclass(frozen=True, slots=True)
class StepCall:
    """A task call waiting to become a step: ``task.s(*args, **kwargs)``."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepStatus:
    """What ``plan`` needs to know of one step."""

    name: str
    depends_on: tuple[str, ...]
    state: StepState


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do next: steps to turn into jobs, waiting steps to cancel, whether to cancel
    the jobs of steps not yet started (``stop``), and the workflow's new state."""

    ready: tuple[str, ...] = ()
    cancel: tuple[str, ...] = ()
    stop_unstarted: bool = False
    state: WorkflowState = WorkflowState.RUNNING


def check_dag(steps: Sequence[StepStatus]) -> None:
    """Raise ``InvalidJob`` unless names are unique and valid and every dependency names an
    earlier step (so the graph has no cycle)."""
    if not steps:
        raise errors.InvalidJob("a workflow needs at least one step")
    seen: set[str] = set()
    for step in steps:
        if not STEP_NAME.fullmatch(step.name):
            raise errors.InvalidJob(f"invalid step name {step.name!r}")
        if step.name in seen:
            raise errors.InvalidJob(f"two steps are named {step.name!r}")
        unknown = [d for d in step.depends_on if d not in seen]
        if unknown:
            raise errors.InvalidJob(f"step {step.name!r} depends on unknown steps {unknown}")
        seen.add(step.name)


def plan(steps: Sequence[StepStatus], policy: FailurePolicy, state: WorkflowState) -> Plan:
    """Decide the next moves of a workflow from its step states (pure, idempotent)."""
    if state is not WorkflowState.RUNNING:
        return Plan(state=state)
    states = {s.name: s.state for s in steps}
    broken = any(st in BROKEN_STEPS for st in states.values())
    if broken and policy is FailurePolicy.STOP:
        waiting = tuple(n for n, st in states.items() if st is StepState.WAITING)
        return Plan(cancel=waiting, stop_unstarted=True, state=WorkflowState.FAILED)
    cancel = _doomed(steps, states)
    for name in cancel:
        states[name] = StepState.CANCELLED
    ready = tuple(
        s.name
        for s in steps
        if states[s.name] is StepState.WAITING
        and all(states[d] is StepState.SUCCEEDED for d in s.depends_on)
    )
    final = WorkflowState.RUNNING
    if not ready and all(st in FINAL_STEPS for st in states.values()):
        failed = any(st in BROKEN_STEPS for st in states.values())
        final = WorkflowState.FAILED if failed else WorkflowState.SUCCEEDED
    return Plan(ready=ready, cancel=cancel, state=final)


def _doomed(steps: Sequence[StepStatus], states: dict[str, StepState]) -> tuple[str, ...]:
    """Waiting steps that can never run: one of their dependencies (transitively) broke.
    Steps are in definition order, so dependencies come first and one sweep suffices."""
    dead = {n for n, st in states.items() if st in BROKEN_STEPS}
    doomed: list[str] = []
    for step in steps:
        if states[step.name] is StepState.WAITING and any(d in dead for d in step.depends_on):
            dead.add(step.name)
            doomed.append(step.name)
    return tuple(doomed)


def step_state_of(job_state: str) -> StepState | None:
    """The step state a finished job implies (None while the job is unfinished)."""
    return {
        "succeeded": StepState.SUCCEEDED,
        "dead": StepState.FAILED,
        "cancelled": StepState.CANCELLED,
    }.get(job_state)


def retry_states(steps: Iterable[StepStatus]) -> list[str]:
    """Names of the steps a retry puts back to ``waiting``: every failed or cancelled one."""
    return [s.name for s in steps if s.state in BROKEN_STEPS]


@dataclass(frozen=True, slots=True)
class WorkflowEvent:
    """One entry of the workflow event feed; ``id`` increases with every event."""

    id: int
    workflow_id: str
    type: str
    step: str | None
    job_id: int | None
    created_at: datetime
    result: Any = None


@dataclass(frozen=True, slots=True)
class StepView:
    """One step as operators see it."""

    name: str
    task: str
    depends_on: tuple[str, ...]
    state: StepState
    job_id: int | None
    job_state: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """One workflow as operators see it (``steps`` filled by ``get``, empty in lists)."""

    id: str
    name: str
    state: WorkflowState
    on_failure: FailurePolicy
    created_at: datetime
    last_progress_at: datetime
    finished_at: datetime | None
    steps_total: int
    steps_done: int
    steps: tuple[StepView, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, times as ISO 8601 strings (``steps`` as dicts)."""
        data = {k: _json_ready(v) for k, v in asdict(self).items()}
        data["steps"] = [{k: _json_ready(v) for k, v in asdict(s).items()} for s in self.steps]
        return data


def _json_ready(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(slots=True)
class WorkflowCommit:
    """What a committed workflow write produced: workflows that emitted events (subscribers
    are woken for them) and the jobs it queued (to announce on the transport)."""

    workflow_ids: set[str] = field(default_factory=set)
    hints: list[JobHint] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.workflow_ids or self.hints)


class WorkflowNotFound(errors.StoreError):
    """No workflow with the given id exists."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"no workflow with id {workflow_id!r}")
        self.workflow_id = workflow_id


@dataclass(frozen=True, slots=True)
class StepDraft:
    """A validated step of a workflow about to be stored (``args_json`` already encoded)."""

    name: str
    task: str
    queue: str
    args_json: str
    depends_on: tuple[str, ...] = ()
    priority: int = 0
    max_attempts: int = 3
    timeout_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class WorkflowDraft:
    """A validated workflow about to be stored."""

    id: str
    name: str
    on_failure: FailurePolicy
    steps: tuple[StepDraft, ...]
